"""The type of a command-line option that names a tier, for the commands of both sides."""

from __future__ import annotations

import argparse
from collections.abc import Callable

from schemas.queues import Tier


def tier_option(accepted: str) -> Callable[[str], Tier]:
    """An argparse ``type`` that reads a tier name as a ``Tier``; anything else is a usage
    error saying it is not a tier and naming ``accepted``, the tiers the command takes."""

    def tier(text: str) -> Tier:
        try:
            return Tier(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not a tier: {accepted}") from None

    return tier
