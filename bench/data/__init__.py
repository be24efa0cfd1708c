"""Generators of the data files the runtime packages ship (``python -m`` each one).

They stand in ``bench`` because they are tooling: a producer install never runs them,
it only reads the files they wrote.
"""
