"""Whether routing on measured outcomes would earn its keep where routing on difficulty
does not, swept over the same stored answers (no engine time).

The shipped router scores a request's difficulty by the tier definitions. Two other
scores are swept as the router's is (:func:`producer.router.frontier.compute_frontier`):

* ``oracle``: large exactly where its stored answer scores higher than small's. No
  router can do better on these answers, so its operating point bounds what any
  classifier could reach on these two models: a goal it misses is out of reach.
* ``learned_cv``: the outcome head (:mod:`producer.router.outcomes`) on the router's
  own features, each case scored by a head fitted on the other folds only, so the
  figures are those of requests the head never saw; the folds are random, so every
  kind of request is represented in training, as it would be for traffic a deployed
  router learned from. Beside its figures, ``head`` is the head fitted on every case,
  which ``llmq router tune`` writes into the artifact.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from producer.router.frontier import Frontier, TierPass, compute_frontier
from producer.router.outcomes import (
    FOLDS,
    Matrix,
    cross_validated_scores,
    fit_outcome_head,
    large_wins,
    oracle_scores,
)


def outcome_routers(
    small: TierPass,
    large: TierPass,
    features: Matrix,
    case_ids: Sequence[str],
    *,
    summarise: Callable[[Frontier], dict[str, Any]],
    router: str | None = None,
) -> dict[str, Any]:
    """The oracle's and the cross-validated outcome head's frontier figures, each as
    ``summarise`` gives them, and the head fitted on every case; ``router``: the model
    hash of the classifier whose features these are."""
    labels = large_wins(small, large, case_ids)
    scores = {
        "oracle": oracle_scores(small, large),
        "learned_cv": cross_validated_scores(features, labels, case_ids),
    }
    result: dict[str, Any] = {"large_wins": int(labels.sum())}
    for name, by_case in scores.items():
        result[name] = summarise(compute_frontier(small, large, by_case, router=router))
    result["learned_cv"]["folds"] = FOLDS
    result["learned_cv"]["head"] = fit_outcome_head(features, labels).to_json()
    return result
