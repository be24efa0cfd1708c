"""Static sentence embeddings: a per-token vector table, averaged. No torch needed."""

from __future__ import annotations

import functools
from typing import TYPE_CHECKING

import numpy as np
import numpy.typing as npt

if TYPE_CHECKING:
    from tokenizers import Tokenizer

Vector = npt.NDArray[np.float32]
MAX_TOKENS = 256  # the teacher encoder's limit; longer text is truncated, still classified
CACHE_SIZE = 4096


class StaticEmbedder:
    """Embeds text as the normalized mean of its tokens' distilled vectors."""

    def __init__(self, tokenizer: Tokenizer, vectors: Vector, weights: Vector) -> None:
        self._tokenizer = tokenizer
        self._vectors = vectors
        self._weights = weights
        self.dimension = int(vectors.shape[1])
        # Repeated texts (greetings, "order status") are common; skip their work.
        self.embed = functools.lru_cache(maxsize=CACHE_SIZE)(self._embed)

    def _embed(self, text: str) -> Vector:
        ids = self._tokenizer.encode(text, add_special_tokens=False).ids[:MAX_TOKENS]
        if not ids:
            return np.zeros(self.dimension, dtype=np.float32)
        weights = self._weights[ids]
        pooled = (self._vectors[ids] * weights[:, None]).sum(axis=0) / max(weights.sum(), 1e-6)
        norm = float(np.linalg.norm(pooled))
        embedded: Vector = (pooled / norm if norm > 0 else pooled).astype(np.float32)
        return embedded

    def embed_many(self, texts: list[str]) -> Vector:
        stacked: Vector = np.stack([self.embed(text) for text in texts])
        return stacked
