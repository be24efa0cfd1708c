"""The Batch API's domain: uploaded request files, batches of batch-priority jobs, and
their results, as plain functions (the gateway's routes and ``llmq batch`` are thin
layers over them).

A batch's lines become ordinary batch-priority jobs through the producer's own submit
path (routing, prompt checks, queue-depth limits); results live in the job rows.
"""
