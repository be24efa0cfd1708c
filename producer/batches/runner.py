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
from functools import partial

from producer.batches.enqueue import enqueue_batch
from producer.batches.store import active_batches, refresh_batch
from producer.client import Client
from schemas.errors import LlmqError

log = logging.getLogger(__name__)

INTERVAL_S = 2.0


class BatchRunner:
    """One asyncio task per gateway process; the blocking work runs in threads.

    Any number of gateways may run one: a batch is fed by whoever holds its lease, and
    a batch whose lease lapsed (its gateway died) is picked up by the next sweep.
    """

    def __init__(self, client: Client, *, interval_s: float = INTERVAL_S) -> None:
        self.client = client
        self.interval_s = interval_s
        self.holder = f"{socket.gethostname()[:40]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
        self._feeding: dict[str, asyncio.Task[None]] = {}
        self._wake = asyncio.Event()
        self._task: asyncio.Task[None] | None = None
        self._stopping = threading.Event()

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
        for batch_id, waiting in await asyncio.to_thread(active_batches, self.client.sessions):
            if waiting and batch_id not in self._feeding:
                task = asyncio.create_task(self._feed(batch_id))
                self._feeding[batch_id] = task
            elif batch_id not in self._feeding:
                refresh = partial(refresh_batch, cancel_job=self.client.cancel)
                await asyncio.to_thread(refresh, self.client.sessions, batch_id)

    async def _feed(self, batch_id: str) -> None:
        try:
            feed = partial(enqueue_batch, holder=self.holder, stopping=self._stopping.is_set)
            await asyncio.to_thread(feed, self.client, batch_id)
        except LlmqError as exc:
            # Released: the next sweep resumes where this one stopped.
            log.warning("enqueuing batch %s stopped: %s", batch_id, exc)
        finally:
            self._feeding.pop(batch_id, None)
