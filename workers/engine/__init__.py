"""Inference engines a worker can hold. ``base`` is the contract, one module per backend."""
