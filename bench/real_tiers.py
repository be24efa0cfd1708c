"""The real tiers of a CPU host, measured: routed (auto) vs everything on the large tier.

Small and medium serve SmolLM2-135M here and large serves Gemma-3-270M, so routing has
two real model sizes to choose between. The shipped quality cases are routed by the
trained classifier and policy; each tier's share then runs through the queue in a
block with only that tier's engine up, and every case also runs on the large tier
(the all-large baseline, in the large block). Same cases, same run: mean job latency
(submit to last token) and quality, routed vs all-large.
"""

from __future__ import annotations

import statistics
from typing import Any

from bench.harness import answer_cases
from producer.client import Client
from producer.quality.cases import load_bench_pool
from producer.quality.runner import CaseAnswer
from producer.quality.scoring import score
from producer.router.classifier import DifficultyClassifier
from producer.router.policy import PolicyConfig, apply_policy
from schemas.queues import Tier
from schemas.settings import Settings


def measure_real_tiers(
    settings: Settings,
    classifier: DifficultyClassifier,
    policy: PolicyConfig,
    *,
    cases: int,
    max_tokens: int,
    concurrency: int = 4,
) -> dict[str, Any]:
    """``measured_*`` figures of routed vs all-large on ``cases`` shipped cases."""
    shipped = load_bench_pool()
    chosen = shipped[:: max(1, len(shipped) // cases)][:cases]
    routed = {
        case.id: apply_policy(classifier.predict(case.chat()[-1]["content"]), policy).tier
        for case in chosen
    }
    answers: dict[str, CaseAnswer] = {}
    all_large: dict[str, CaseAnswer] = {}
    with Client(settings) as client:
        for tier in Tier:
            mine = [case for case in chosen if routed[case.id] == tier]
            if not mine and tier != Tier.LARGE:
                continue
            todo = chosen if tier == Tier.LARGE else mine
            run = answer_cases(
                settings,
                client,
                tier,
                todo,
                what=f"measured, {tier} tier",
                max_tokens=max_tokens,
                concurrency=concurrency,
            )
            if tier == Tier.LARGE:
                # Greedy answers of the same model: routed-large cases reuse these.
                all_large = run.answers
                answers.update({case.id: all_large[case.id] for case in mine})
            else:
                answers.update(run.answers)

    def mean_ms(found: dict[str, CaseAnswer]) -> float:
        return statistics.mean(a.total_ms for a in found.values() if a.total_ms is not None)

    def quality(found: dict[str, CaseAnswer]) -> float:
        return statistics.mean(float(score(c, found[c.id].text)) for c in chosen)

    routed_ms, large_ms = mean_ms(answers), mean_ms(all_large)
    return {
        "measured_cases": len(chosen),
        "measured_max_tokens": max_tokens,
        "measured_routed_share": {
            tier.value: sum(1 for t in routed.values() if t == tier) for tier in Tier
        },
        "measured_models": {tier.value: settings.tier(tier).model for tier in Tier},
        "measured_routed_mean_ms": round(routed_ms, 1),
        "measured_all_large_mean_ms": round(large_ms, 1),
        "measured_ratio": round(routed_ms / large_ms, 3) if large_ms else None,
        "measured_quality_routed": round(quality(answers), 4),
        "measured_quality_all_large": round(quality(all_large), 4),
    }
