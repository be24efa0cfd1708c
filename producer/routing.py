"""Where a request's tier is decided: the one hook every submit passes through."""

from __future__ import annotations

from typing import Literal

from schemas.queues import Tier
from schemas.requests import GenerationRequest, RoutingDecision
from schemas.settings import Settings


def route(
    request: GenerationRequest, *, requested: Tier | Literal["auto"], settings: Settings
) -> RoutingDecision:
    """Pick the tier that serves ``request``. An explicit tier always wins.

    ``auto`` goes to the configured default tier until a classifier is plugged in here.
    """
    del request  # the classifier will read it
    if requested != "auto":
        return RoutingDecision(tier=requested, requested=requested, reason="explicit tier")
    return RoutingDecision(
        tier=settings.default_tier, requested="auto", reason="auto: configured default tier"
    )
