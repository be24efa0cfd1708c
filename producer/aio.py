"""The asyncio client: the same promises as :mod:`producer.client`, awaitable."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator
from functools import partial

import redis.asyncio as aioredis
from redis.asyncio.client import PubSub
from sqlalchemy.orm import Session, sessionmaker

from producer.client import Client, Recorded, result_from_terminal
from producer.enqueue import AsyncEnqueuer
from producer.jobs import new_job_id
from producer.streams import Event, aread_events, confirmed, early_subscription
from producer.submission import RequestLike
from schemas.broker import async_redis_client
from schemas.errors import BrokerUnavailable, QueueFull, job_ended
from schemas.events import ErrorEvent, TerminalEvent, TokenEvent, is_terminal
from schemas.jobs import JobResult, JobStatus
from schemas.queues import Priority, Tier
from schemas.settings import Settings
from schemas.tables import Job


class AsyncClient:
    """Submits jobs from asyncio code. Create one per event loop and reuse it."""

    def __init__(self, settings: Settings) -> None:
        self.settings = settings
        # Submitting is a short database commit plus one publish; running it in a
        # thread keeps the event loop free without a second driver stack.
        self._sync = Client(settings)
        self._redis = async_redis_client(settings.broker_url)
        self._enqueuer = AsyncEnqueuer(self._redis)

    @classmethod
    def from_env(cls) -> AsyncClient:
        """A client configured from ``LLMQ_*`` environment variables."""
        return cls(Settings.from_env())

    async def submit(
        self,
        request: RequestLike,
        *,
        tier: Tier | str = "auto",
        priority: Priority | str = Priority.INTERACTIVE,
        idempotency_key: str | None = None,
        owner: str | None = None,
        require_warm_worker: bool = False,
        deadline_s: float | None = None,
        conversation_id: str | None = None,
        follow: bool = False,
    ) -> AsyncJobHandle:
        """See :meth:`producer.client.Client.submit`.

        With ``follow``, the caller means to read the job's events at once: the client
        subscribes to the job's stream before the job is queued, so the handle's
        :meth:`AsyncJobHandle.events` start listening with no subscribe and no log read
        of their own after the worker has the job. Read them, or :meth:`AsyncJobHandle.close`
        the handle, or the subscription's connection stays open.
        """
        record = partial(
            self._sync.record,
            request,
            tier=tier,
            priority=priority,
            idempotency_key=idempotency_key,
            owner=owner,
            require_warm_worker=require_warm_worker,
            deadline_s=deadline_s,
            conversation_id=conversation_id,
        )
        if not follow:
            recorded = await asyncio.to_thread(record)
            await self._enqueue(recorded)
            return AsyncJobHandle(self, recorded.job.id, recorded.tier, recorded.priority)
        job_id = new_job_id()
        subscription = await early_subscription(self._redis, job_id)
        try:
            # The insert runs while the subscription is confirmed.
            recorded = await asyncio.to_thread(partial(record, job_id=job_id))
            subscribed = await confirmed(subscription)
            await self._enqueue(recorded)
        except BaseException:
            await subscription.aclose()  # type: ignore[no-untyped-call, unused-ignore]
            raise
        handle = AsyncJobHandle(self, recorded.job.id, recorded.tier, recorded.priority)
        if recorded.created and subscribed:
            handle.subscription = subscription
        else:  # a repeated idempotency key names an older job, already under way
            await subscription.aclose()  # type: ignore[no-untyped-call, unused-ignore]
        return handle

    async def _enqueue(self, recorded: Recorded) -> None:
        """Queue a job :meth:`Client.record` created, from this event loop; its row is
        deleted if that fails (``BrokerUnavailable``, ``QueueFull``)."""
        if not recorded.created:
            return
        try:
            await self._enqueuer.enqueue(
                recorded.job.id,
                tier=recorded.tier,
                priority=recorded.priority,
                max_depth=recorded.max_depth,
                request=recorded.job.request,
            )
        except (BrokerUnavailable, QueueFull):
            await asyncio.to_thread(self._sync.unrecord, recorded.job.id)
            raise

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
        subscription: PubSub | None = None,
    ) -> AsyncIterator[Event]:
        """A job's stream events from ``from_seq`` on, ending with the terminal event.

        ``subscription``: one to the job's channel, confirmed before the job was queued
        (it is used, then closed, by the reading).
        """
        lookup = partial(self._sync.terminal_event, job_id)
        return aread_events(
            self._redis,
            job_id,
            from_seq=from_seq,
            timeout=timeout,
            terminal_lookup=lookup,
            subscription=subscription,
        )

    async def aclose(self) -> None:
        """Release connections."""
        await self._redis.aclose()
        await asyncio.to_thread(self._sync.close)

    async def __aenter__(self) -> AsyncClient:
        return self

    async def __aexit__(self, *_exc: object) -> None:
        await self.aclose()


class AsyncJobHandle:
    """One submitted job, for asyncio code."""

    def __init__(self, client: AsyncClient, job_id: str, tier: Tier, priority: Priority) -> None:
        self.client = client
        self.job_id = job_id
        self.tier = tier
        self.priority = priority
        self.subscription: PubSub | None = None
        """Set by ``submit(follow=True)``: taken by the first :meth:`events`."""
        self._terminal: TerminalEvent | None = None

    async def events(
        self, *, from_seq: int = 0, timeout: float | None = None
    ) -> AsyncIterator[Event]:
        """Every stream event from ``from_seq``, in order, each exactly once."""
        subscription, self.subscription = self.subscription, None
        events = self.client.events(
            self.job_id, from_seq=from_seq, timeout=timeout, subscription=subscription
        )
        async for event in events:
            if is_terminal(event):
                self._terminal = event
            yield event

    async def close(self) -> None:
        """Close the subscription ``submit(follow=True)`` opened, if no reading took it."""
        subscription, self.subscription = self.subscription, None
        if subscription is not None:
            await subscription.aclose()  # type: ignore[no-untyped-call, unused-ignore]

    async def stream(self, *, timeout: float | None = None) -> AsyncIterator[str]:
        """Yield text chunks as they are generated; raises ``JobFailed`` on a job error."""
        async for event in self.events(timeout=timeout):
            if isinstance(event, TokenEvent):
                yield event.text
            elif isinstance(event, ErrorEvent):
                raise job_ended(self.job_id, event.message, event.status)

    async def result(self, *, timeout: float | None = None) -> JobResult:
        """Wait for the final text and timings; raises ``JobFailed`` or ``JobTimeout``."""
        if self._terminal is None:
            async for _ in self.events(timeout=timeout):
                pass
        assert self._terminal is not None
        return result_from_terminal(self.job_id, self.tier, self.priority, self._terminal)
