"""Auto routing's fallback to the nearest served tier."""

from __future__ import annotations

import pytest

from producer.router.served import nearest_served
from schemas.queues import Tier


@pytest.mark.parametrize(
    ("wanted", "served", "expected"),
    [
        (Tier.LARGE, {Tier.LARGE}, Tier.LARGE),
        (Tier.LARGE, {Tier.SMALL}, Tier.SMALL),
        (Tier.LARGE, {Tier.SMALL, Tier.MEDIUM}, Tier.MEDIUM),
        (Tier.SMALL, {Tier.MEDIUM, Tier.LARGE}, Tier.MEDIUM),
        (Tier.MEDIUM, {Tier.SMALL, Tier.LARGE}, Tier.LARGE),  # upward first
        (Tier.MEDIUM, set(), None),
    ],
)
def test_nearest_served_errs_upward(wanted: Tier, served: set[Tier], expected: Tier) -> None:
    assert nearest_served(wanted, served.__contains__) == expected
