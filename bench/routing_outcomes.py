"""Whether routing on measured outcomes would earn its keep where routing on difficulty
does not, swept over the same stored answers (no engine time).

The shipped router scores a request's difficulty by the tier definitions. Two other
scores are swept as the router's is (:func:`producer.router.frontier.compute_frontier`):

* ``oracle``: large exactly where its stored answer scores higher than small's. No
  router can do better on these answers, so its operating point bounds what any
  classifier could reach on these two models: a goal it misses is out of reach.
* ``learned_cv``: a logistic regression on the router's own features (the static
  embedding and the shape features) that predicts whether large answers better than
  small, in the manner of RouteLLM's routers trained on preference data. Each case is
  scored by a model trained on the other folds only (k-fold, out of fold), so the
  figures are those of requests the model never saw; the folds are random, so every
  kind of request is represented in training, as it would be for traffic a deployed
  router learned from.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from producer.router.frontier import TierPass, compute_frontier

Matrix = npt.NDArray[np.float64]
FOLDS = 10
SEED = 7
L2 = 0.1
EPOCHS = 1500
LEARNING_RATE = 0.5


def oracle_scores(small: TierPass, large: TierPass) -> dict[str, float]:
    """Each case's gain from going large (its large score minus its small score),
    mapped from [-1, 1] onto the [0, 1] of a decision score."""
    return {
        case_id: (1.0 + large.answers[case_id].score - answer.score) / 2
        for case_id, answer in small.answers.items()
    }


def large_wins(small: TierPass, large: TierPass, case_ids: Sequence[str]) -> npt.NDArray[np.int64]:
    """1 where the large tier's answer scores higher than the small tier's, else 0."""
    return np.array(
        [int(large.answers[c].score > small.answers[c].score) for c in case_ids], dtype=np.int64
    )


def fit_logistic(features: Matrix, labels: npt.NDArray[np.int64]) -> tuple[Matrix, float]:
    """Weights and bias of an L2-regularised logistic regression, by gradient descent
    from zero (deterministic). Features are expected standardised."""
    weights = np.zeros(features.shape[1])
    bias = 0.0
    n = len(labels)
    for _ in range(EPOCHS):
        predicted = _sigmoid(features @ weights + bias)
        error = predicted - labels
        weights -= LEARNING_RATE * (features.T @ error / n + L2 * weights)
        bias -= LEARNING_RATE * float(error.mean())
    return weights, bias


def cross_validated_scores(
    features: Matrix,
    labels: npt.NDArray[np.int64],
    case_ids: Sequence[str],
    *,
    folds: int = FOLDS,
    seed: int = SEED,
) -> dict[str, float]:
    """Each case's predicted chance that large answers better, from a model fitted on
    the other folds (standardised with those folds' mean and spread)."""
    order = np.random.default_rng(seed).permutation(len(case_ids))
    scores = np.zeros(len(case_ids))
    for fold in range(folds):
        held = order[fold::folds]
        train = np.setdiff1d(order, held)
        mean = features[train].mean(axis=0)
        scale = features[train].std(axis=0) + 1e-6
        weights, bias = fit_logistic((features[train] - mean) / scale, labels[train])
        scores[held] = _sigmoid((features[held] - mean) / scale @ weights + bias)
    return {case_id: float(score) for case_id, score in zip(case_ids, scores, strict=True)}


def _sigmoid(values: Matrix) -> Matrix:
    result: Matrix = 1.0 / (1.0 + np.exp(-np.clip(values, -30, 30)))
    return result


def outcome_routers(
    small: TierPass,
    large: TierPass,
    features: Matrix,
    case_ids: Sequence[str],
    *,
    summarise: Any,
) -> dict[str, Any]:
    """The oracle's and the cross-validated learned router's frontier figures, each as
    ``summarise`` (a frontier to its summary) gives them, without the sweep itself."""
    labels = large_wins(small, large, case_ids)
    scores = {
        "oracle": oracle_scores(small, large),
        "learned_cv": cross_validated_scores(features, labels, case_ids),
    }
    result: dict[str, Any] = {"large_wins": int(labels.sum())}
    for name, by_case in scores.items():
        summary = summarise(compute_frontier(small, large, by_case, router=name))
        summary.pop("frontier", None)
        result[name] = summary
    result["learned_cv"]["folds"] = FOLDS
    return result
