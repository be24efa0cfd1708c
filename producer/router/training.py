"""``llmq router train``: distil the encoder, fit the head, write a versioned artifact.

Needs torch and transformers (the ``cpu`` or ``gpu`` extra), imported only while
training; the artifact it writes needs only numpy and tokenizers, so producers load
it anywhere.
"""

from __future__ import annotations

import logging
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np
from tokenizers import Tokenizer

from producer.router.artifact import RouterArtifact, save_artifact
from producer.router.classifier import SHAPE, DifficultyClassifier, feature_matrix, training_words
from producer.router.dataset import Example, data_hash, load_examples
from producer.router.distill import contextual_vectors, distill, teacher_dir
from producer.router.embedding import StaticEmbedder
from producer.router.evaluation import evaluate_router
from producer.router.policy import PolicyConfig
from producer.router.softmax_head import TIERS, HeadConfig, Matrix, train_head
from schemas.progress import ProgressBar
from schemas.settings import Settings

log = logging.getLogger(__name__)

TEACHER = "sentence-transformers/all-MiniLM-L6-v2"
FEATURES = [SHAPE]
"""Extra features beside the static embedding (on the held-out requests they added about
two points of accuracy)."""


def train_router(
    settings: Settings,
    *,
    seed: int = 7,
    extra: list[Example] | None = None,
    progress: bool = False,
) -> tuple[Path, dict[str, Any]]:
    """Train on the repository's data (plus ``extra`` training examples); return path, metrics.

    With ``progress``, each step shows a bar (or its phase and elapsed time) on stderr.
    """
    examples = load_examples() + list(extra or [])
    train = [e for e in examples if e.split == "train"]
    validation = [e for e in examples if e.split == "validation"]
    model_dir = teacher_dir()
    base = base_vectors(settings, model_dir, progress=progress)
    with ProgressBar("contextual vectors", len(train), unit="texts", enabled=progress) as bar:
        vectors = contextual_vectors(model_dir, base, [e.text for e in train], on_progress=bar)
    tokenizer_json = (model_dir / "tokenizer.json").read_text()
    config = HeadConfig(seed=seed)
    with ProgressBar("router head", enabled=progress) as steps:
        steps.phase(f"fitting {config.epochs} epochs on {len(train)} examples")
        mean, scale, weights, bias = fit(tokenizer_json, vectors, train, config, FEATURES)
        steps.phase(f"scoring {len(validation)} validation examples")
        policy = PolicyConfig(settings.router_large_threshold, settings.router_min_confidence)
        vocabulary = set(Tokenizer.from_str(tokenizer_json).get_vocab())
        known_words = training_words([e.text for e in train], vocabulary)
        draft = RouterArtifact(
            tokenizer_json,
            vectors,
            mean,
            scale,
            weights,
            bias,
            {"known_words": known_words, "features": FEATURES},
        )
        metrics = evaluate_router(DifficultyClassifier(draft), policy, validation).as_dict()
        metadata = {
            "known_words": known_words,
            "features": FEATURES,
            "teacher": TEACHER,
            "data_hash": data_hash(examples),
            "train_examples": len(train),
            "validation_examples": len(validation),
            "head": asdict(config),
            "policy": asdict(policy),
            "validation": metrics,
        }
        artifact = RouterArtifact(tokenizer_json, vectors, mean, scale, weights, bias, metadata)
        steps.phase("saving the artifact")
        return save_artifact(artifact, settings.router_folder), metadata


def fit(
    tokenizer_json: str,
    vectors: Matrix,
    train: list[Example],
    config: HeadConfig,
    features_used: list[str] | None = None,
) -> tuple[Matrix, Matrix, Matrix, Matrix]:
    """Standardisation and softmax head over the static embeddings of ``train`` (and the
    extra features named in ``features_used``)."""
    ones = np.ones(vectors.shape[0], dtype=np.float32)
    embedder = StaticEmbedder(Tokenizer.from_str(tokenizer_json), vectors, ones)
    features = feature_matrix(embedder, [e.text for e in train], features_used or [])
    mean = features.mean(axis=0).astype(np.float32)
    scale = (features.std(axis=0) + 1e-6).astype(np.float32)
    labels = np.array([TIERS.index(e.tier) for e in train], dtype=np.int64)
    weights, bias = train_head(((features - mean) / scale).astype(np.float32), labels, config)
    return mean, scale, weights, bias


def base_vectors(settings: Settings, model_dir: Path, *, progress: bool = False) -> Matrix:
    """The single-token distillation, computed once per host and cached."""
    cache = settings.router_folder / "base-vectors.npy"
    if cache.is_file():
        cached: Matrix = np.load(cache)
        return cached
    # A phase line while the encoder loads, a bar once the first batch is encoded.
    with ProgressBar("distilling the encoder", unit="tokens", enabled=progress) as bar:
        vectors = distill(model_dir, on_progress=bar)
    cache.parent.mkdir(parents=True, exist_ok=True)
    np.save(cache, vectors)
    return vectors
