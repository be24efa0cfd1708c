"""The asyncio client: the same promises as :mod:`producer.client`, awaitable."""

from __future__ import annotations

import asyncio
import concurrent.futures
import contextlib
from collections.abc import AsyncIterator, Awaitable, Callable
from functools import partial
from typing import Any

import redis.asyncio as aioredis
from sqlalchemy.orm import Session, sessionmaker
from typing_extensions import Unpack

from producer.client import Client, EmbedOptions, SubmitOptions
from producer.embeddings import EmbedInput
from producer.handles import HandleCore, with_logprobs
from producer.jobs import ended_rows, new_job_id, terminal_event_from_row
from producer.pubsub_pool import PubSub, PubSubPool
from producer.streams import Event, aread_events
from producer.submission import RequestLike
from producer.terminal_rows import TerminalRows
from schemas.broker import async_redis_client
from schemas.events import TokenLogprob
from schemas.jobs import JobResult, JobStatus
from schemas.queues import Priority, Tier, event_channel
from schemas.settings import Settings
from schemas.tables import Job


def _waiter(admitted: asyncio.Future[Any]) -> Callable[[], None]:
    """A blocking wait, for a worker thread, on the loop's ``admitted``: returns when
    it succeeded, raises what it raised (``CancelledError`` if it was cancelled)."""
    outcome: concurrent.futures.Future[None] = concurrent.futures.Future()

    def settle(done: asyncio.Future[Any]) -> None:
        if done.cancelled():
            outcome.set_exception(concurrent.futures.CancelledError())
        elif (error := done.exception()) is not None:
            outcome.set_exception(error)
        else:
            outcome.set_result(None)

    admitted.add_done_callback(settle)
    return outcome.result


async def _settled(admitted: asyncio.Future[Any]) -> None:
    """Wait for ``admitted`` to end, whatever it ends with (the submit's own error is
    the one raised)."""
    with contextlib.suppress(BaseException):
        await asyncio.shield(admitted)


class AsyncClient:
    """Submits jobs from asyncio code. Create one per event loop and reuse it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Submitting is a short database commit plus one publish; running it in a
        # thread keeps the event loop free without a second driver stack.
        self._sync = Client(settings)
        self._redis = async_redis_client(settings.broker_url)
        self._subscriptions = PubSubPool(self._redis)
        self._rows = TerminalRows(partial(ended_rows, self._sync.sessions), terminal_event_from_row)

    @classmethod
    def from_env(cls) -> AsyncClient:
        """A client configured from ``LLMQ_*`` environment variables."""
        return cls(Settings.from_env())

    async def submit(
        self,
        request: RequestLike,
        *,
        subscribe: bool = False,
        admission: Awaitable[object] | None = None,
        **options: Unpack[SubmitOptions],
    ) -> AsyncJobHandle:
        """See :meth:`producer.client.Client.submit`, whose enqueue options
        (:class:`~producer.client.SubmitOptions`) it takes by name, ``subscribe``
        included: read the handle's events or ``await handle.aclose()``.

        ``admission`` is awaited on the loop while the request is validated and routed
        (its round trips overlap that work); nothing is written or sent until it has
        succeeded (its result is not read), and what it raises is the submit's. It is
        awaited to its end however the submit ends.
        """
        job_id = new_job_id()
        admitted = asyncio.ensure_future(admission) if admission is not None else None
        # Subscribed on the loop while the thread sends the message; the thread waits
        # for the confirmation only before the row (nothing is published sooner).
        confirming = self._subscriptions.confirming(event_channel(job_id)) if subscribe else None
        try:
            handle = await asyncio.to_thread(
                partial(
                    self._sync.submit,
                    request,
                    **options,
                    job_id=job_id,
                    before_row=confirming.wait_confirmed if confirming else None,
                    before_send=_waiter(admitted) if admitted is not None else None,
                )
            )
        except BaseException:
            if confirming is not None:
                await confirming.give_back()
            if admitted is not None:
                await _settled(admitted)
            raise
        early = await confirming.take() if confirming is not None else None
        if early is not None and handle.job_id != job_id:  # a replay: another job's stream
            await self.give_back(early, job_id)
            early = None
        return AsyncJobHandle(
            self,
            handle.job_id,
            handle.tier,
            handle.priority,
            early=early,
            routed_tier=handle.routed_tier,
        )

    async def submit_embeddings(
        self, texts: EmbedInput, **options: Unpack[EmbedOptions]
    ) -> AsyncJobHandle:
        """See :meth:`producer.client.Client.submit_embeddings`, whose enqueue options
        (:class:`~producer.client.EmbedOptions`) it takes by name."""
        handle = await asyncio.to_thread(partial(self._sync.submit_embeddings, texts, **options))
        return AsyncJobHandle(self, handle.job_id, handle.tier, handle.priority)

    async def give_back(self, early: PubSub, job_id: str) -> None:
        """Return a subscription to ``job_id``'s stream that will not be read."""
        await self._subscriptions.give_back(early, event_channel(job_id))

    @property
    def sync(self) -> Client:
        """The synchronous client underneath (shares settings and connections)."""
        return self._sync

    @property
    def redis(self) -> aioredis.Redis:
        """The asyncio Redis connection this client streams with (for a caller's own
        counters, such as the gateway's rate limits)."""
        return self._redis

    @property
    def sessions(self) -> sessionmaker[Session]:
        """The job database's session factory (for read-only lookups such as API keys)."""
        return self._sync.sessions

    async def warm(self) -> None:
        """See :meth:`producer.client.Client.warm`."""
        await asyncio.to_thread(self._sync.warm)

    async def job(self, job_id: str) -> Job:
        """See :meth:`producer.client.Client.job`."""
        return await asyncio.to_thread(self._sync.job, job_id)

    async def handle(self, job_id: str) -> AsyncJobHandle:
        """A handle on an existing job; raises ``JobNotFound``."""
        job = await self.job(job_id)
        return AsyncJobHandle(self, job.id, Tier(job.tier), Priority(job.priority))

    async def cancel(self, job_id: str) -> None:
        """See :meth:`producer.client.Client.cancel`."""
        await asyncio.to_thread(self._sync.cancel, job_id)

    async def status(self, job_id: str) -> JobStatus:
        """The job's current status as recorded in the database."""
        return await asyncio.to_thread(self._sync.status, job_id)

    def events(
        self,
        job_id: str,
        *,
        from_seq: int = 0,
        timeout: float | None = None,
        early: PubSub | None = None,
    ) -> AsyncIterator[Event]:
        """See :meth:`producer.client.Client.events`."""
        return aread_events(
            self._redis,
            job_id,
            from_seq=from_seq,
            timeout=timeout,
            subscriptions=self._subscriptions,
            early=early,
            terminal_lookup=partial(self._rows.terminal, job_id),
            reconnect_budget_s=self._sync.settings.timeouts.stream_reconnect_s,
        )

    async def aclose(self) -> None:
        """Release connections."""
        await self._rows.aclose()
        await self._subscriptions.aclose()
        await self._redis.aclose()
        await asyncio.to_thread(self._sync.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()


class AsyncJobHandle(HandleCore[AsyncClient, PubSub]):
    """One submitted job, for asyncio code."""

    async def events(
        self, *, from_seq: int = 0, timeout: float | None = None
    ) -> AsyncIterator[Event]:
        """Every stream event from ``from_seq``, in order, each exactly once."""
        early, stale = self._take_early(from_seq)
        if stale is not None:
            await self.client.give_back(stale, self.job_id)
        events = self.client.events(self.job_id, from_seq=from_seq, timeout=timeout, early=early)
        async for event in events:
            yield self._seen(event)

    async def aclose(self) -> None:
        """Give back the subscription ``submit`` sent ahead, if no read took it."""
        early = self._take_unread()
        if early is not None:
            await self.client.give_back(early, self.job_id)

    async def stream(self, *, timeout: float | None = None) -> AsyncIterator[str]:
        """Yield text chunks as they are generated; raises ``JobFailed`` on a job error."""
        async for event in self.events(timeout=timeout):
            chunk = self._chunk(event)
            if chunk is not None:
                yield chunk

    async def result(self, *, timeout: float | None = None) -> JobResult:
        """Wait for the final text and timings; raises ``JobFailed`` or ``JobTimeout``."""
        logprobs: dict[int, list[TokenLogprob]] = {}
        if not self._ended:
            async for event in self.events(timeout=timeout):
                logprobs = with_logprobs(logprobs, event)
        return self._result(logprobs)
