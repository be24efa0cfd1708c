"""A routing score learned from measured outcomes: how likely large answers better.

The difficulty classifier scores a request by the tier definitions; whether the large
model actually answers it better than the small one is a different question, and on
some pairs of models the two disagree. ``llmq bench routing`` stores every case's
answer on both tiers; from them, each case is labelled by whether large scored higher,
and a logistic regression on the classifier's own features learns that label (in the
manner of RouteLLM's routers trained on preference data). Its figures are measured out
of fold (each case scored by a model fitted on the other folds), and the head fitted on
every case is what ``llmq router tune`` writes into the artifact.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from producer.router.frontier import TierPass
from schemas.errors import ConfigError

Matrix = npt.NDArray[np.float64]
Labels = npt.NDArray[np.int64]
FOLDS = 10
SEED = 7
L2 = 0.1
EPOCHS = 1500
LEARNING_RATE = 0.5
OUTCOME_HEAD_KEY = "outcome_head"
"""Where an artifact's metadata holds the outcome head ``llmq router tune`` wrote."""


@dataclass(frozen=True)
class OutcomeHead:
    """p(large answers better) = sigmoid(((features - mean) / scale) . weights + bias)."""

    weights: Matrix
    bias: float
    mean: Matrix
    scale: Matrix

    def score(self, features: Matrix) -> Matrix:
        """The chance, for each row of ``features``, that large answers better."""
        return _sigmoid((features - self.mean) / self.scale @ self.weights + self.bias)

    def to_json(self) -> dict[str, Any]:
        return {
            "weights": [float(x) for x in self.weights],
            "bias": self.bias,
            "mean": [float(x) for x in self.mean],
            "scale": [float(x) for x in self.scale],
        }

    @classmethod
    def from_json(cls, data: Mapping[str, Any]) -> OutcomeHead:
        """Raises ``ConfigError`` for a head that is not one."""
        try:
            head = cls(
                weights=np.asarray(data["weights"], dtype=np.float64),
                bias=float(data["bias"]),
                mean=np.asarray(data["mean"], dtype=np.float64),
                scale=np.asarray(data["scale"], dtype=np.float64),
            )
        except (KeyError, TypeError, ValueError) as exc:
            raise ConfigError(f"the outcome head is damaged: {exc}") from exc
        if not head.weights.shape == head.mean.shape == head.scale.shape:
            raise ConfigError("the outcome head's weights, mean and scale differ in size")
        return head


def oracle_scores(small: TierPass, large: TierPass) -> dict[str, float]:
    """Each case's gain from going large (its large score minus its small score),
    mapped from [-1, 1] onto the [0, 1] of a decision score."""
    return {
        case_id: (1.0 + large.answers[case_id].score - answer.score) / 2
        for case_id, answer in small.answers.items()
    }


def large_wins(small: TierPass, large: TierPass, case_ids: Sequence[str]) -> Labels:
    """1 where the large tier's answer scores higher than the small tier's, else 0."""
    return np.array(
        [int(large.answers[c].score > small.answers[c].score) for c in case_ids], dtype=np.int64
    )


def fit_outcome_head(features: Matrix, labels: Labels) -> OutcomeHead:
    """An L2-regularised logistic regression on standardised ``features``, by gradient
    descent from zero (the same data give the same head)."""
    mean = features.mean(axis=0)
    scale = features.std(axis=0) + 1e-6
    standard = (features - mean) / scale
    weights = np.zeros(features.shape[1])
    bias = 0.0
    n = len(labels)
    for _ in range(EPOCHS):
        error = _sigmoid(standard @ weights + bias) - labels
        weights -= LEARNING_RATE * (standard.T @ error / n + L2 * weights)
        bias -= LEARNING_RATE * float(error.mean())
    return OutcomeHead(weights, bias, mean, scale)


def cross_validated_scores(
    features: Matrix,
    labels: Labels,
    case_ids: Sequence[str],
    *,
    folds: int = FOLDS,
    seed: int = SEED,
) -> dict[str, float]:
    """Each case's predicted chance that large answers better, from a head fitted on
    the other folds only (random folds)."""
    order = np.random.default_rng(seed).permutation(len(case_ids))
    scores = np.zeros(len(case_ids))
    for fold in range(folds):
        held = order[fold::folds]
        train = np.setdiff1d(order, held)
        head = fit_outcome_head(features[train], labels[train])
        scores[held] = head.score(features[held])
    return {case_id: float(score) for case_id, score in zip(case_ids, scores, strict=True)}


def _sigmoid(values: Matrix) -> Matrix:
    result: Matrix = 1.0 / (1.0 + np.exp(-np.clip(values, -30, 30)))
    return result
