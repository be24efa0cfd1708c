"""Admission: whether a job may be queued now (a warm worker, room on its queue)."""

from __future__ import annotations

import logging
import threading
import time

import redis

from producer.status import live_workers
from schemas.boundary import broker_boundary
from schemas.errors import BrokerUnavailable, NoWarmWorker, QueueFull
from schemas.queues import Tier
from schemas.registry import WorkerEntry

# Rough drain time per waiting job, for the Retry-After hint of a full queue.
RETRY_SECONDS_PER_1000 = 5
# Not settings, these three: they pace this process's copy of the worker registry, which
# no bound depends on (a stale copy costs one registry read on the submit's path).
WORKER_CACHE_S = 1.0
"""How often the registry is re-read, in the background, while submits come."""
WORKER_STALE_S = 3.0
"""A snapshot older than this (none yet, or Redis was away) is read on the submit's path."""
REFRESH_IDLE_S = 60.0
"""The background reader stops after this long without a submit (it restarts on one)."""

log = logging.getLogger(__name__)


def queue_full(queue: str, depth: int, limit: int) -> QueueFull:
    """The error for a submit refused because ``queue`` holds ``depth`` of ``limit``."""
    retry_after = max(1, depth * RETRY_SECONDS_PER_1000 // 1000)
    return QueueFull(
        f"queue {queue} is full ({depth} waiting, limit {limit}); retry in about {retry_after} s",
        depth=depth,
        retry_after_s=retry_after,
    )


class WorkerDirectory:
    """The live workers, re-read from the registry once a second in the background.

    Both admission (is a warm worker there?) and load-aware routing (how many warm
    slots?) read it on every submit; one snapshot serves both, and a submit waits for
    the registry's two round trips only when the snapshot is older than
    ``WORKER_STALE_S`` (the first submit, or Redis was away).
    """

    def __init__(self, client: redis.Redis, *, restart_grace_s: float = 120.0) -> None:
        self._redis = client
        self._workers: list[WorkerEntry] = []
        self._read_at = float("-inf")
        self._used_at = float("-inf")
        self._restart_grace_s = restart_grace_s
        self._warm_seen: dict[Tier, float] = {}
        self._lock = threading.Lock()
        self._refresher: threading.Thread | None = None
        self._closed = threading.Event()

    def snapshot(self) -> list[WorkerEntry]:
        """Every live worker entry; raises ``BrokerUnavailable`` if Redis cannot be read."""
        self._used_at = time.monotonic()
        if self._used_at - self._read_at > WORKER_STALE_S:
            self._read()
        self._keep_fresh()
        return self._workers

    def close(self) -> None:
        """Stop the background reader."""
        self._closed.set()

    def _read(self) -> None:
        with broker_boundary("read the worker registry"):
            workers = live_workers(self._redis)
        self._workers, self._read_at = workers, time.monotonic()

    def _keep_fresh(self) -> None:
        with self._lock:
            if self._refresher is not None or self._closed.is_set():
                return
            self._refresher = threading.Thread(
                target=self._refresh, name="llmq-worker-registry", daemon=True
            )
        self._refresher.start()

    def _refresh(self) -> None:
        try:
            while not self._closed.wait(WORKER_CACHE_S):
                if time.monotonic() - self._used_at > REFRESH_IDLE_S:
                    return
                try:
                    self._read()
                except BrokerUnavailable as exc:
                    log.debug("worker registry not re-read: %s", exc)
        finally:
            with self._lock:
                self._refresher = None

    def serves(self, tier: Tier) -> bool:
        """Whether work queued for ``tier`` will be read: by a warm worker, or soon.

        A worker that is starting (registered, warming up) serves soon, and so does a
        tier that had a warm worker less than ``restart_grace_s`` ago (its worker is
        restarting after a crash or a deploy). Raises ``BrokerUnavailable``.
        """
        now = time.monotonic()
        serving = [w for w in self.snapshot() if w.tier == tier]
        if any(w.warm for w in serving):
            self._warm_seen[tier] = now
            return True
        if serving:
            return True
        seen = self._warm_seen.get(tier)
        return seen is not None and now - seen < self._restart_grace_s

    def require_warm(self, tier: Tier) -> None:
        """Raise ``NoWarmWorker`` unless ``tier`` is served (:meth:`serves`): work for a
        starting or restarting tier waits in the queue instead of being refused. Only a
        tier with no worker for longer than the grace is refused."""
        if not self.serves(tier):
            raise NoWarmWorker(f"no worker serves the {tier} tier right now")
