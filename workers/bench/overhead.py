"""``llmq bench overhead``: what the queue path adds to time-to-first-token."""

from __future__ import annotations

import statistics
from typing import Any

from schemas.queues import Tier
from schemas.settings import Settings
from workers.bench.harness import (
    bench_rig,
    direct_ttft_ms,
    paired_samples,
    percentile,
    queued_ttft_ms,
    rounded,
)


def run_overhead(
    settings: Settings, *, tier: Tier, samples: int, max_tokens: int
) -> dict[str, Any]:
    """Alternate direct and queued requests, ``samples`` each; report p50s and the difference.

    Alternating pairs keeps a noisy machine's drift out of the comparison. The engine
    finishes each request before the next starts, so both paths see an idle engine.
    """
    with bench_rig(settings, tier, concurrency=4) as rig:
        direct, queued = paired_samples(
            lambda index: direct_ttft_ms(rig, f"bench-direct-{index}", max_tokens),
            lambda _index: queued_ttft_ms(rig, max_tokens),
            samples=samples,
        )
    added = [q - d for d, q in zip(direct, queued, strict=True)]
    return {
        "bench": "overhead",
        "tier": tier.value,
        "n": samples,
        "max_tokens": max_tokens,
        "direct_ttft_ms_p50": rounded(statistics.median(direct)),
        "queued_ttft_ms_p50": rounded(statistics.median(queued)),
        "added_ms_p50": rounded(statistics.median(queued) - statistics.median(direct)),
        "added_ms_paired_p50": rounded(statistics.median(added)),
        "direct_ttft_ms_p90": rounded(percentile(direct, 90)),
        "queued_ttft_ms_p90": rounded(percentile(queued, 90)),
    }
