"""Load-aware steps: when a tier's interactive queue is over its wait SLO, try a neighbour.

The expected wait of a tier is its interactive depth times its recent mean service
time, divided by the warm slots serving it. Stepping up is always allowed (only
cost); stepping down only where the tier's configuration allows it (quality).
"""

from __future__ import annotations

import redis

from producer.router.policy import one_down, one_up
from schemas.queues import SERVICE_MS_KEY, Priority, Tier, queue_name
from schemas.registry import WorkerEntry
from schemas.settings import Settings

# Not a setting: the prior of the tier's moving service time until its first job ends.
DEFAULT_SERVICE_MS = 1000.0


def expected_wait_ms(client: redis.Redis, tier: Tier, workers: list[WorkerEntry]) -> float:
    """Estimated queue wait of a new interactive job on ``tier``; inf without workers."""
    depth = int(client.llen(queue_name(tier, Priority.INTERACTIVE)))
    slots = sum(w.concurrency for w in workers if w.tier == tier and w.warm)
    if slots == 0:
        return float("inf")
    raw = client.hget(SERVICE_MS_KEY, tier.value)
    service_ms = float(raw) if raw is not None else DEFAULT_SERVICE_MS
    return depth * service_ms / slots


def load_adjusted(
    client: redis.Redis, tier: Tier, settings: Settings, workers: list[WorkerEntry]
) -> tuple[Tier, str | None]:
    """``tier`` or a neighbour with headroom (given the live ``workers``), and why."""
    wait = expected_wait_ms(client, tier, workers)
    slo = settings.tier(tier).interactive_wait_slo_ms
    if wait <= slo:
        return tier, None
    candidates = [one_up(tier)]
    if settings.tier(tier).allow_step_down:
        candidates.append(one_down(tier))
    for neighbour in candidates:
        if neighbour is tier:
            continue
        neighbour_wait = expected_wait_ms(client, neighbour, workers)
        if neighbour_wait <= settings.tier(neighbour).interactive_wait_slo_ms:
            return neighbour, (
                f"{tier} queue wait ~{_ms(wait)} over its {slo:.0f} ms SLO; "
                f"{neighbour} has headroom (~{_ms(neighbour_wait)})"
            )
    return tier, None


def _ms(value: float) -> str:
    return "no warm worker" if value == float("inf") else f"{value:.0f} ms"
