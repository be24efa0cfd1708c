"""The contracts shared by producers and workers: requests, events, queues, settings, tables.

This package imports nothing else of llmq, so both sides can depend on it.
"""
