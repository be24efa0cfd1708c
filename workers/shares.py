"""The old home of the slot shares, for callers outside ``workers`` that still name it.

The shares live in ``workers.scheduler.slots`` (``workers.scheduler.SlotShares``,
``workers.scheduler.slot_shares``); new code imports them from there.
"""

from workers.scheduler.slots import SlotShares, slot_shares

__all__ = ["SlotShares", "slot_shares"]
