"""The embedding tier's worker: sentence-transformers behind the same queues, rows and
streams as the generation tiers (``schemas.embeddings`` holds the contract)."""
