"""The worker's scheduling, sans-IO: events in, decisions out.

Nothing here touches Redis, Celery or the engine, and nothing blocks; every part takes
a clock. Drivers translate what happens into events and carry the decisions out:
``workers.consumer_step`` (Celery's consumer: messages taken, jobs ended, the timer;
it pauses and resumes queues) and ``workers.scheduler_driver`` (job threads: holds
before a batch start, first-token tickets, halting batch jobs that give way).

- :mod:`~workers.scheduler.interface`: the events a scheduler takes (a Protocol).
- :mod:`~workers.scheduler.decisions`: what it answers (run, hold, give way, ...).
- :mod:`~workers.scheduler.scheduler`: :class:`Scheduler`, the policy and its state.
- :mod:`~workers.scheduler.slots`: how slots are shared between priorities.
- :mod:`~workers.scheduler.slo_share`: batch's share while people wait, steered
  against the interactive SLO.
- :mod:`~workers.scheduler.inter_tokens`: an interactive stream's time between
  tokens, in windows observed while it streams.
- :mod:`~workers.scheduler.turns`: batch's turns where it pauses for people.
- :mod:`~workers.scheduler.give_way`: which running batch jobs give way.
- :mod:`~workers.scheduler.holders`, :mod:`~workers.scheduler.first_tokens`: the
  timed sets and the first-token median the scheduler keeps.
"""

from workers.scheduler.decisions import GiveWay, Hold, HoldReason, ReadQueues, Requeue, Run
from workers.scheduler.first_tokens import MIN_RECENT_FIRST_TOKENS, RecentFirstTokens
from workers.scheduler.give_way import giving_way
from workers.scheduler.inter_tokens import InterTokenWindows
from workers.scheduler.interface import SchedulerInterface
from workers.scheduler.scheduler import Scheduler, WaitBounds, steered_share
from workers.scheduler.slo_share import ShareChange, ShareTuning, SloShare
from workers.scheduler.slots import SlotShares, slot_shares

__all__ = [
    "MIN_RECENT_FIRST_TOKENS",
    "GiveWay",
    "Hold",
    "HoldReason",
    "InterTokenWindows",
    "ReadQueues",
    "RecentFirstTokens",
    "Requeue",
    "Run",
    "Scheduler",
    "SchedulerInterface",
    "ShareChange",
    "ShareTuning",
    "SloShare",
    "SlotShares",
    "WaitBounds",
    "giving_way",
    "slot_shares",
    "steered_share",
]
