"""Checks that decide, before anything is written, whether a job may be queued now."""

from __future__ import annotations

import time

import redis

from producer.status import live_workers
from schemas.errors import BrokerUnavailable, NoWarmWorker, QueueFull
from schemas.queues import Priority, Tier, queue_name

# Rough drain time per waiting job, for the Retry-After hint of a full queue.
RETRY_SECONDS_PER_1000 = 5
WORKER_CACHE_S = 1.0


def check_queue_depth(client: redis.Redis, tier: Tier, priority: Priority, limit: int) -> None:
    """Raise ``QueueFull`` (with the depth and a retry hint) if the queue is at ``limit``."""
    queue = queue_name(tier, priority)
    try:
        depth = int(client.llen(queue))
    except redis.RedisError as exc:
        raise BrokerUnavailable(
            f"cannot reach Redis to check {queue}: {exc}; nothing was enqueued"
        ) from exc
    if depth >= limit:
        retry_after = max(1, depth * RETRY_SECONDS_PER_1000 // 1000)
        raise QueueFull(
            f"queue {queue} is full ({depth} waiting, limit {limit}); "
            f"retry in about {retry_after} s",
            depth=depth,
            retry_after_s=retry_after,
        )


class WarmWorkers:
    """Which tiers have a warm worker, re-read from the registry at most once a second."""

    def __init__(self, client: redis.Redis) -> None:
        self._redis = client
        self._tiers: set[str] = set()
        self._read_at = 0.0

    def require(self, tier: Tier) -> None:
        """Raise ``NoWarmWorker`` unless a warm worker serves ``tier``."""
        if time.monotonic() - self._read_at > WORKER_CACHE_S:
            try:
                workers = live_workers(self._redis)
            except redis.RedisError as exc:
                raise BrokerUnavailable(f"cannot read the worker registry: {exc}") from exc
            self._tiers = {str(w.get("tier")) for w in workers if w.get("warm")}
            self._read_at = time.monotonic()
        if tier.value not in self._tiers:
            raise NoWarmWorker(f"no warm worker serves the {tier} tier right now")
