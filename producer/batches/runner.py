"""The gateway's batch runner: enqueues batches, resumes them after restarts, moves
their status on (completion, expiry) even when nobody reads them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import math
import os
import socket
import threading
import time
import uuid
from collections import Counter
from collections.abc import Callable, Mapping
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import NamedTuple, TypeVar

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from producer.batches.enqueue import enqueue_batch
from producer.batches.retention import expire_files
from producer.batches.status import ACTIVE, BatchStatus
from producer.batches.store import refresh_batch
from producer.client import Client
from schemas.boundary import database_boundary
from schemas.errors import LlmqError
from schemas.tables import Batch, as_utc, utcnow

log = logging.getLogger(__name__)

FEEDERS = 4

T = TypeVar("T")


class ActiveBatch(NamedTuple):
    """A batch not yet over: its owner, and whether lines of it still wait to be
    enqueued by someone (no live claim on it)."""

    id: str
    owner: str | None
    waiting: bool


def active_batches(sessions: sessionmaker[Session]) -> list[ActiveBatch]:
    """Every batch not yet over, oldest first."""
    now = utcnow()
    with database_boundary("find the running batches"), sessions() as session:
        rows = session.execute(
            select(
                Batch.id, Batch.owner, Batch.status, Batch.enqueued, Batch.total, Batch.lease_until
            )
            .where(Batch.status.in_([s.value for s in ACTIVE]))
            .order_by(Batch.created_at, Batch.id)
        ).all()
    found = []
    for batch_id, owner, status, enqueued, total, lease_until in rows:
        free = lease_until is None or as_utc(lease_until) <= now
        waiting = status != BatchStatus.CANCELLING and enqueued < total and free
        found.append(ActiveBatch(batch_id, owner, waiting))
    return found


def fair_order(
    waiting: list[ActiveBatch],
    feeding: Counter[str | None],
    last_fed: Mapping[str | None, float] | None = None,
) -> list[ActiveBatch]:
    """``waiting`` (oldest first) in the order feeders should take them: round-robin
    by owner, the owner with the fewest batches being fed (``feeding``) first, then
    the one whose feeder started longest ago (``last_fed``; never: first), then the
    oldest batch's owner; so one key's many batches never take every feeder while
    another key's batch waits."""
    last = last_fed or {}
    queues: dict[str | None, list[ActiveBatch]] = {}
    for batch in waiting:
        queues.setdefault(batch.owner, []).append(batch)
    taken = Counter(feeding)
    order: list[ActiveBatch] = []
    while queues:
        owner = min(queues, key=lambda o: (taken[o], last.get(o, -math.inf)))
        order.append(queues[owner].pop(0))
        taken[owner] += 1
        if not queues[owner]:
            del queues[owner]
    return order


def over_share(
    owner: str | None, feeding: Counter[str | None], waiting: frozenset[str | None], feeders: int
) -> bool:
    """Whether one of ``owner``'s feeders should give its turn up: another owner has a
    batch waiting for a feeder, and ``owner`` is fed more than an even share of them."""
    if not waiting - {owner}:
        return False
    owners = len(set(feeding) | waiting)
    return feeding[owner] > max(1, feeders // max(1, owners))


class BatchRunner:
    """One asyncio task per gateway process; the blocking work runs in threads of its own.

    A feeder holds its thread for its batch's run (it waits out a full batch queue
    there), so feeders never take the event loop's default pool, which key checks and
    submits use: at most ``feeders`` batches are fed at once by this process, and the
    sweep has one more thread, so a full set of feeders never holds it up. Feeders go
    round-robin by owner: a key fed more than its even share gives a feeder up (its
    batch resumes later, where it stopped) when another key's batch waits, and with
    more keys waiting than feeders, a feeder gives its batch up after ``turn_s``. Any number
    of gateways may run one: a batch is fed by whoever holds its lease, and a batch
    whose lease lapsed (its gateway died) is picked up by the next sweep.
    """

    def __init__(
        self,
        client: Client,
        *,
        interval_s: float | None = None,
        feeders: int = FEEDERS,
        turn_s: float | None = None,
    ) -> None:
        timeouts = client.settings.timeouts
        self.client = client
        self.interval_s = timeouts.batch_sweep_s if interval_s is None else interval_s
        self.feeders = max(1, feeders)
        self.holder = f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._feeding: dict[str, asyncio.Task[None]] = {}
        self.turn_s = timeouts.batch_turn_s if turn_s is None else turn_s
        """A feeder fed its batch this long gives it up when another key's batch waits
        for a feeder and none is free (more keys than feeders take turns)."""
        self.file_sweep_s = timeouts.file_sweep_s
        """How often a sweep looks for files past their retention."""
        self._owners: dict[str, str | None] = {}
        self._started: dict[str, float] = {}
        self._last_fed: dict[str | None, float] = {}
        # Replaced whole (never changed in place) so feeder threads read it safely:
        # how many batches each owner has fed now, and owners with a batch waiting.
        self._share: tuple[Counter[str | None], frozenset[str | None]] = (Counter(), frozenset())
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = threading.Event()
        self._feed_pool = ThreadPoolExecutor(self.feeders, thread_name_prefix="llmq-batch-feed")
        self._sweep_pool = ThreadPoolExecutor(1, thread_name_prefix="llmq-batch-sweep")
        self._expired_at = -math.inf

    def start(self) -> None:
        self._task = asyncio.create_task(self._loop())

    def wake(self) -> None:
        """Look for work now (a batch was just created or cancelled)."""
        self._wake.set()

    async def stop(self) -> None:
        """Stop feeding (within a line's submit); the batches resume elsewhere or later."""
        self._stopping.set()
        tasks = [t for t in (self._task, *self._feeding.values()) if t is not None]
        for task in tasks:
            task.cancel()
        for task in tasks:
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        # Feeders see the stop flag within a line's submit; no thread is waited for here.
        self._feed_pool.shutdown(wait=False, cancel_futures=True)
        self._sweep_pool.shutdown(wait=False, cancel_futures=True)

    async def _in(self, pool: ThreadPoolExecutor, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(pool, work)

    async def _loop(self) -> None:
        while True:
            try:
                await self.sweep()
            except LlmqError as exc:
                log.warning("batch sweep failed: %s", exc)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), self.interval_s)
            self._wake.clear()

    async def sweep(self) -> None:
        """Start feeding every batch with lines no one sends; refresh every running one;
        at most every ``file_sweep_s``, delete files past their retention."""
        await self._expire_files()
        found = await self._in(self._sweep_pool, partial(active_batches, self.client.sessions))
        waiting = [b for b in found if b.waiting and b.id not in self._feeding]
        left: set[str | None] = set()
        for batch in fair_order(waiting, self._fed_owners(), self._last_fed):
            if len(self._feeding) >= self.feeders:  # a later sweep starts it
                left.add(batch.owner)
                continue
            self._owners[batch.id] = batch.owner
            self._started[batch.id] = self._last_fed[batch.owner] = time.monotonic()
            self._feeding[batch.id] = asyncio.create_task(self._feed(batch.id))
        self._share = (self._fed_owners(), frozenset(left))
        for batch in found:
            if batch.waiting or batch.id in self._feeding:
                continue
            refresh = partial(
                refresh_batch,
                self.client.sessions,
                batch.id,
                cancel_batch_jobs=self.client.cancel_batch_jobs,
            )
            await self._in(self._sweep_pool, refresh)

    async def _expire_files(self) -> None:
        retention_days = self.client.settings.file_retention_days
        now = time.monotonic()
        if retention_days <= 0 or now - self._expired_at < self.file_sweep_s:
            return
        self._expired_at = now
        expire = partial(expire_files, self.client.sessions, retention_days=retention_days)
        deleted = await self._in(self._sweep_pool, expire)
        if deleted:
            log.info("deleted %d batch files older than %g days", deleted, retention_days)

    def _fed_owners(self) -> Counter[str | None]:
        return Counter(self._owners[b] for b in self._feeding if b in self._owners)

    def _gives_way(self, batch_id: str) -> bool:
        """Called by a feeder between lines (in its thread): stop for now, another
        owner's batch is owed this feeder."""
        feeding, waiting = self._share
        owner = self._owners.get(batch_id)
        if over_share(owner, feeding, waiting, self.feeders):
            return True
        held_s = time.monotonic() - self._started.get(batch_id, math.inf)
        return bool(waiting - {owner}) and held_s > self.turn_s

    async def _feed(self, batch_id: str) -> None:
        try:
            feed = partial(
                enqueue_batch,
                self.client,
                batch_id,
                holder=self.holder,
                stopping=lambda: self._stopping.is_set() or self._gives_way(batch_id),
            )
            await self._in(self._feed_pool, feed)
        except LlmqError as exc:
            # Released: the next sweep resumes where this one stopped.
            log.warning("enqueuing batch %s stopped: %s", batch_id, exc)
        finally:
            self._feeding.pop(batch_id, None)
            self._owners.pop(batch_id, None)
            self._started.pop(batch_id, None)
            # No longer counted against its owner: others see the share it left.
            self._share = (self._fed_owners(), frozenset())
            self.wake()  # a feeder is free: a batch left waiting for one may start
