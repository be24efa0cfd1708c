"""A trained router on disk: one ``.npz`` holding the embedding table, head and metadata.

Artifacts are named by the hash of their content, so the same data and seed give the
same file name; ``current.json`` in the same folder says which one serves.
"""

from __future__ import annotations

import hashlib
import io
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from schemas.errors import ConfigError

CURRENT = "current.json"
Array = npt.NDArray[np.float32]


@dataclass(frozen=True)
class RouterArtifact:
    """Everything the classifier needs; no torch, no model files."""

    tokenizer_json: str
    vectors: Array  # vocab x dim, float16 on disk
    mean: Array
    scale: Array
    weights: Array
    bias: Array
    metadata: dict[str, Any]

    def to_bytes(self) -> bytes:
        buffer = io.BytesIO()
        np.savez(
            buffer,
            tokenizer_json=np.frombuffer(self.tokenizer_json.encode(), dtype=np.uint8),
            vectors=self.vectors.astype(np.float16),
            mean=self.mean,
            scale=self.scale,
            weights=self.weights,
            bias=self.bias,
            metadata=np.frombuffer(json.dumps(self.metadata, sort_keys=True).encode(), np.uint8),
        )
        return buffer.getvalue()

    @property
    def content_hash(self) -> str:
        return hashlib.sha256(self.to_bytes()).hexdigest()[:16]

    @property
    def model_hash(self) -> str:
        """Identifies what the router computes (table, head, tokenizer), not its metadata:
        tuning its threshold keeps it, so a frontier measured before still applies."""
        digest = hashlib.sha256(self.tokenizer_json.encode())
        for array in (self.vectors.astype(np.float16), self.mean, self.scale):
            digest.update(np.ascontiguousarray(array).tobytes())
        for array in (self.weights, self.bias):
            digest.update(np.ascontiguousarray(array).tobytes())
        return digest.hexdigest()[:16]


def save_artifact(artifact: RouterArtifact, folder: Path, *, make_current: bool = True) -> Path:
    """Write ``router-<hash>.npz``; point ``current.json`` at it."""
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"router-{artifact.content_hash}.npz"
    path.write_bytes(artifact.to_bytes())
    if make_current:
        (folder / CURRENT).write_text(json.dumps({"artifact": path.name}) + "\n")
    return path


def current_artifact_path(folder: Path) -> Path | None:
    """The artifact ``current.json`` names, or None when nothing was trained yet."""
    pointer = folder / CURRENT
    if not pointer.is_file():
        return None
    path = folder / str(json.loads(pointer.read_text())["artifact"])
    return path if path.is_file() else None


def load_artifact(path: Path) -> RouterArtifact:
    """Read an artifact; raises ``ConfigError`` if it is missing or damaged."""
    try:
        with np.load(path) as data:
            return RouterArtifact(
                tokenizer_json=bytes(data["tokenizer_json"]).decode(),
                vectors=data["vectors"].astype(np.float32),
                mean=data["mean"],
                scale=data["scale"],
                weights=data["weights"],
                bias=data["bias"],
                metadata=json.loads(bytes(data["metadata"]).decode()),
            )
    except (OSError, KeyError, ValueError) as exc:
        raise ConfigError(f"cannot load router artifact {path}: {exc}") from exc
