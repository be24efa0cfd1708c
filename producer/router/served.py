"""Auto routing among the tiers that are served: no job goes to a queue nobody reads."""

from __future__ import annotations

from collections.abc import Callable

from producer.router.policy import TIER_ORDER
from schemas.queues import Tier


def nearest_served(wanted: Tier, served: Callable[[Tier], bool]) -> Tier | None:
    """``wanted`` if it is served, else the nearest served tier above it (routing errs
    upward: a larger model only costs more), else the nearest below; None when no base
    tier is served at all."""
    index = TIER_ORDER.index(wanted.base)
    above = TIER_ORDER[index:]
    below = list(reversed(TIER_ORDER[:index]))
    for tier in [*above, *below]:
        if served(tier):
            return tier
    return None
