"""The worker's scheduling decisions, sans-IO: events in, decisions out.

Nothing here touches Redis, Celery or the engine; each part takes a clock and is
driven by the worker (``workers.capacity`` wires it into Celery's consumer).

- :mod:`workers.scheduler.slo_share`: how many slots batch work may hold while
  interactive work is about, sized against the tier's interactive SLO.
"""

from workers.scheduler.slo_share import ShareTuning, SloShare

__all__ = ["ShareTuning", "SloShare"]
