"""Admission: whether a job may be queued now (a warm worker, room on its queue)."""

from __future__ import annotations

import time

import redis

from producer.status import live_workers
from schemas.boundary import broker_boundary
from schemas.errors import NoWarmWorker, QueueFull
from schemas.queues import Tier
from schemas.registry import WorkerEntry

# Rough drain time per waiting job, for the Retry-After hint of a full queue.
RETRY_SECONDS_PER_1000 = 5
WORKER_CACHE_S = 1.0


def queue_full(queue: str, depth: int, limit: int) -> QueueFull:
    """The error for a submit refused because ``queue`` holds ``depth`` of ``limit``."""
    retry_after = max(1, depth * RETRY_SECONDS_PER_1000 // 1000)
    return QueueFull(
        f"queue {queue} is full ({depth} waiting, limit {limit}); retry in about {retry_after} s",
        depth=depth,
        retry_after_s=retry_after,
    )


class WorkerDirectory:
    """The live workers, re-read from the registry at most once a second.

    Both admission (is a warm worker there?) and load-aware routing (how many warm
    slots?) read it on every submit; one cached snapshot serves both.
    """

    def __init__(self, client: redis.Redis, *, restart_grace_s: float = 120.0) -> None:
        self._redis = client
        self._workers: list[WorkerEntry] = []
        self._read_at = float("-inf")
        self._restart_grace_s = restart_grace_s
        self._warm_seen: dict[Tier, float] = {}

    def snapshot(self) -> list[WorkerEntry]:
        """Every live worker entry; raises ``BrokerUnavailable`` if Redis cannot be read."""
        if time.monotonic() - self._read_at > WORKER_CACHE_S:
            with broker_boundary("read the worker registry"):
                self._workers = live_workers(self._redis)
            self._read_at = time.monotonic()
        return self._workers

    def require_warm(self, tier: Tier) -> None:
        """Raise ``NoWarmWorker`` unless ``tier`` is served: by a warm worker, or soon.

        A worker that is starting (registered, warming up) serves soon, and so does a
        tier that had a warm worker less than ``restart_grace_s`` ago (its worker is
        restarting after a crash or a deploy): work waits in the queue for them instead
        of being refused. Only a tier with no worker for longer is refused.
        """
        now = time.monotonic()
        serving = [w for w in self.snapshot() if w.tier == tier]
        if any(w.warm for w in serving):
            self._warm_seen[tier] = now
            return
        if serving:
            return
        seen = self._warm_seen.get(tier)
        if seen is not None and now - seen < self._restart_grace_s:
            return
        raise NoWarmWorker(f"no worker serves the {tier} tier right now")
