"""The asyncio client's subscription to a job's stream, sent before the job is written.

The submit itself runs in a thread (``AsyncClient.submit``); meanwhile the event loop
reads Redis's confirmation of the subscription. If the confirmation is in before the
job's message is sent, nothing published on the job's channel can be missed, and the
stream's reader starts by listening, with nothing to ask Redis before the first token
(``stream_protocol.Joined.BEFORE_JOB``). Otherwise the reader reads the replay log
first, as every reader does.
"""

from __future__ import annotations

import asyncio
import threading

import redis

from producer.pubsub_pool import EarlySubscription, PubSub, PubSubPool, confirmation
from producer.stream_protocol import IDLE_POLL_S, Joined


class SubscriptionAhead:
    """One submit's subscription to its job's channel, from before the job existed."""

    def __init__(self, pool: PubSubPool, pubsub: PubSub, channel: str) -> None:
        self._pool = pool
        self._pubsub = pubsub
        self._channel = channel
        self._confirmed = threading.Event()
        self._before_job = False
        self._watch = asyncio.create_task(self._wait_for_confirmation())

    @classmethod
    async def send(cls, pool: PubSubPool, channel: str) -> SubscriptionAhead | None:
        """Subscribe to ``channel``; None if Redis fails (the stream subscribes later
        and reports it then)."""
        try:
            pubsub = await pool.take(channel)
        except redis.RedisError:
            return None
        return cls(pool, pubsub, channel)

    def before_enqueue(self) -> None:
        """Called by the submit's thread just before the job's message is sent."""
        self._before_job = self._confirmed.is_set()

    async def settle(self, *, ours: bool) -> EarlySubscription[PubSub] | None:
        """After the submit: the subscription for the job's first read, or None when it
        is not ``ours`` (an idempotent replay returned another job) or never confirmed."""
        try:
            confirmed = await self._watch  # normally in long before the submit returns
        except BaseException:
            await self._close()
            raise
        if not confirmed:
            await self._close()
            return None
        if not ours:
            await self._pool.give_back(self._pubsub, self._channel)
            return None
        joined = Joined.BEFORE_JOB if self._before_job else Joined.CONFIRMED
        return EarlySubscription(self._pubsub, joined)

    async def abandon(self) -> None:
        """The submit failed: close the connection (a read of it may be cut short)."""
        self._watch.cancel()
        await self._close()

    async def _wait_for_confirmation(self) -> bool:
        try:
            confirmed = await confirmation(self._pubsub, self._channel, IDLE_POLL_S)
        except redis.RedisError:
            return False
        if confirmed:
            self._confirmed.set()
        return confirmed

    async def _close(self) -> None:
        await self._pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
