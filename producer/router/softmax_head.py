"""Training the routing head: softmax regression in numpy, reproducible to the bit."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from schemas.queues import Tier

TIERS = list(Tier)
Matrix = npt.NDArray[np.float32]


@dataclass(frozen=True)
class HeadConfig:
    """Training knobs; the defaults are what the shipped artifact uses."""

    epochs: int = 2000
    learning_rate: float = 0.1
    l2: float = 0.03
    seed: int = 7
    # Sending a large request to a small model hurts; the reverse only costs money.
    class_weights: tuple[float, float, float] = (1.0, 1.3, 2.0)


def train_head(
    features: Matrix, labels: npt.NDArray[np.int64], config: HeadConfig
) -> tuple[Matrix, Matrix]:
    """Weights (dim x classes) and bias (classes) minimising weighted cross-entropy."""
    rng = np.random.default_rng(config.seed)
    dimension = features.shape[1]
    classes = len(TIERS)
    weights = (rng.standard_normal((dimension, classes)) * 0.01).astype(np.float32)
    bias = np.zeros(classes, dtype=np.float32)
    onehot = np.eye(classes, dtype=np.float32)[labels]
    sample_weight = np.asarray(config.class_weights, dtype=np.float32)[labels][:, None]
    scale = 1.0 / float(sample_weight.sum())
    for _ in range(config.epochs):
        probs = softmax(features @ weights + bias)
        grad = (probs - onehot) * sample_weight * scale
        weights -= config.learning_rate * (features.T @ grad + config.l2 * weights)
        bias -= config.learning_rate * grad.sum(axis=0)
    return weights, bias


def softmax(logits: Matrix) -> Matrix:
    shifted = logits - logits.max(axis=-1, keepdims=True)
    exp = np.exp(shifted)
    probs: Matrix = (exp / exp.sum(axis=-1, keepdims=True)).astype(np.float32)
    return probs


@dataclass(frozen=True)
class Evaluation:
    accuracy: float
    precision: dict[str, float]
    recall: dict[str, float]
    confusion: list[list[int]]  # rows: true tier, columns: predicted tier

    def as_dict(self) -> dict[str, object]:
        return {
            "accuracy": round(self.accuracy, 4),
            "precision": {k: round(v, 4) for k, v in self.precision.items()},
            "recall": {k: round(v, 4) for k, v in self.recall.items()},
            "confusion": self.confusion,
            "labels": [tier.value for tier in TIERS],
        }


def evaluate(true: list[Tier], predicted: list[Tier]) -> Evaluation:
    """Accuracy, per-tier precision and recall, confusion matrix."""
    index = {tier: i for i, tier in enumerate(TIERS)}
    confusion = [[0] * len(TIERS) for _ in TIERS]
    for t, p in zip(true, predicted, strict=True):
        confusion[index[t]][index[p]] += 1
    precision, recall = {}, {}
    for tier, i in index.items():
        predicted_as = sum(row[i] for row in confusion)
        actual = sum(confusion[i])
        precision[tier.value] = confusion[i][i] / predicted_as if predicted_as else 0.0
        recall[tier.value] = confusion[i][i] / actual if actual else 0.0
    correct = sum(confusion[i][i] for i in range(len(TIERS)))
    return Evaluation(correct / max(len(true), 1), precision, recall, confusion)
