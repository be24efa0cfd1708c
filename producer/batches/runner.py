"""The gateway's batch runner: enqueues batches, resumes them after restarts, moves
their status on (completion, expiry) even when nobody reads them."""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import socket
import threading
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from functools import partial
from typing import TypeVar

from producer.batches.enqueue import enqueue_batch
from producer.batches.store import active_batches, refresh_batch
from producer.client import Client
from schemas.errors import LlmqError

log = logging.getLogger(__name__)

INTERVAL_S = 2.0
FEEDERS = 4

T = TypeVar("T")


class BatchRunner:
    """One asyncio task per gateway process; the blocking work runs in threads of its own.

    A feeder holds its thread for its batch's whole run (it waits out a full batch queue
    there), so feeders never take the event loop's default pool, which key checks and
    submits use: at most ``feeders`` batches are fed at once by this process, and the
    sweep has one more thread, so a full set of feeders never holds it up. Any number
    of gateways may run one: a batch is fed by whoever holds its lease, and a batch
    whose lease lapsed (its gateway died) is picked up by the next sweep.
    """

    def __init__(
        self, client: Client, *, interval_s: float = INTERVAL_S, feeders: int = FEEDERS
    ) -> None:
        self.client = client
        self.interval_s = interval_s
        self.feeders = max(1, feeders)
        self.holder = f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._feeding: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = threading.Event()
        self._feed_pool = ThreadPoolExecutor(self.feeders, thread_name_prefix="llmq-batch-feed")
        self._sweep_pool = ThreadPoolExecutor(1, thread_name_prefix="llmq-batch-sweep")

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
        """Start feeding every batch with lines no one sends; refresh every running one."""
        found = await self._in(self._sweep_pool, partial(active_batches, self.client.sessions))
        for batch_id, waiting in found:
            if batch_id in self._feeding:
                continue
            if waiting:
                if len(self._feeding) < self.feeders:  # else a later sweep starts it
                    self._feeding[batch_id] = asyncio.create_task(self._feed(batch_id))
                continue
            refresh = partial(
                refresh_batch, self.client.sessions, batch_id, cancel_job=self.client.cancel
            )
            await self._in(self._sweep_pool, refresh)

    async def _feed(self, batch_id: str) -> None:
        try:
            feed = partial(
                enqueue_batch,
                self.client,
                batch_id,
                holder=self.holder,
                stopping=self._stopping.is_set,
            )
            await self._in(self._feed_pool, feed)
        except LlmqError as exc:
            # Released: the next sweep resumes where this one stopped.
            log.warning("enqueuing batch %s stopped: %s", batch_id, exc)
        finally:
            self._feeding.pop(batch_id, None)
            self.wake()  # a feeder is free: a batch left waiting for one may start
