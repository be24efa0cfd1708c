"""Pub/sub connections kept between streams.

redis-py closes a pub/sub object's connection when the object is closed, so a reader
that opens one per stream pays a TCP connect and Redis's handshake on every stream,
on the way to its first token, and the server sees a connection come and go per
request. A stream that ends cleanly here unsubscribes and leaves its connection for
the next one, which then subscribes with one round trip.
"""

from __future__ import annotations

import asyncio
import contextlib
import threading
from collections.abc import AsyncIterator, Iterator
from typing import Any

import redis
import redis.asyncio as aioredis

PubSub = aioredis.client.PubSub
SyncPubSub = redis.client.PubSub

DEFAULT_KEEP = 32
"""Idle connections kept at most; one per stream that ran at once is enough."""
# Not a setting: an unconfirmed subscription falls back to reading the replay log, so
# this paces a fallback and bounds no outcome.
CONFIRM_WAIT_S = 1.0
"""How long :meth:`PubSubPool.confirmed` waits for Redis to confirm a subscription."""


class PubSubPool:
    """Hands out pub/sub objects subscribed to one channel; reuses connections.

    One per event loop (it is not thread-safe). A reused connection may still carry the
    last stream's unsubscribe confirmation, or a message published to its old channel
    just before: readers take only their own channel's messages (:func:`own_message`).
    """

    def __init__(self, client: aioredis.Redis, *, keep: int = DEFAULT_KEEP) -> None:
        self._client = client
        self._keep = keep
        self._idle: list[PubSub] = []

    @property
    def idle(self) -> int:
        """Connections waiting for a stream."""
        return len(self._idle)

    async def _take(self, channel: str) -> PubSub:
        """A kept (or new) pub/sub object with ``channel``'s SUBSCRIBE sent, its
        confirmation unread. Raises ``redis.RedisError`` if Redis cannot be reached."""
        pubsub = self._idle.pop() if self._idle else self._client.pubsub()
        try:
            await pubsub.subscribe(channel)
        except BaseException:
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
            raise
        return pubsub

    async def confirmed(self, channel: str, timeout: float = CONFIRM_WAIT_S) -> PubSub | None:
        """A pub/sub object subscribed to ``channel``, its confirmation read: from now on
        it hears everything published there. None if Redis fails or does not confirm
        within ``timeout`` seconds (a reader subscribes later, and reports it then)."""
        try:
            pubsub = await self._take(channel)
        except redis.RedisError:
            return None
        try:
            message = await own_message(pubsub, channel, timeout)
        except BaseException as exc:
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
            if isinstance(exc, redis.RedisError):
                return None
            raise
        if message is None or message.get("type") != "subscribe":
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
            return None
        return pubsub

    def confirming(self, channel: str) -> ConfirmingSubscription:
        """A subscription to ``channel`` confirmed on this event loop from now on, for a
        thread to wait for (:meth:`ConfirmingSubscription.wait_confirmed`) just before it
        writes the job's row. Call it on the loop."""
        return ConfirmingSubscription(self, channel)

    @contextlib.asynccontextmanager
    async def subscribed(
        self, channel: str, *, taken: PubSub | None = None
    ) -> AsyncIterator[PubSub]:
        """A pub/sub object subscribed to ``channel``: ``taken`` (from :meth:`confirmed`
        for this channel) or a new subscription, its confirmation still to read.

        Raises ``redis.RedisError`` if Redis cannot be reached. A block that ends with an
        exception (a lost connection, a cancelled stream) closes the connection: what is
        left unread on it is unknown.
        """
        pubsub = taken if taken is not None else await self._take(channel)
        try:
            yield pubsub
        except BaseException:
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
            raise
        await self.give_back(pubsub, channel)

    async def aclose(self) -> None:
        """Close the idle connections."""
        idle, self._idle = self._idle, []
        for pubsub in idle:
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]

    async def give_back(self, pubsub: PubSub, channel: str) -> None:
        """Unsubscribe ``pubsub`` from ``channel`` and keep it for the next stream (or
        close it when the pool is full or Redis fails)."""
        if len(self._idle) >= self._keep:
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
            return
        try:
            await pubsub.unsubscribe(channel)
        except redis.RedisError:
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
            return
        except BaseException:  # cancelled mid-way: what is on the connection is unknown
            await pubsub.aclose()  # type: ignore[no-untyped-call, unused-ignore]
            raise
        self._idle.append(pubsub)


class ConfirmingSubscription:
    """:class:`PendingSubscription` for the asyncio client, whose submits run in a
    thread: the event loop subscribes and reads the confirmation while the thread
    sends the job's message; the thread waits for it before writing the job's row."""

    def __init__(self, pool: PubSubPool, channel: str) -> None:
        self._pool = pool
        self._channel = channel
        self._task = asyncio.ensure_future(pool.confirmed(channel))
        self._done = threading.Event()
        self._task.add_done_callback(lambda _task: self._done.set())
        self._in_time = False

    def wait_confirmed(self) -> None:
        """Block (in the submitting thread) until Redis confirmed or the attempt ended.

        If it takes longer than a confirmation may, the row is written anyway and the
        subscription is not used: the reader subscribes afresh and reads the log."""
        self._in_time = self._done.wait(2 * CONFIRM_WAIT_S)

    async def take(self) -> PubSub | None:
        """The subscription, confirmed before the row was written; None if there is none."""
        pubsub = await self._task
        if pubsub is not None and not self._in_time:
            await self._pool.give_back(pubsub, self._channel)
            return None
        return pubsub

    async def give_back(self) -> None:
        """Return the subscription unread (or stop making it)."""
        self._task.cancel()
        await asyncio.wait([self._task])
        if self._task.cancelled() or self._task.exception() is not None:
            return  # what it had was closed
        pubsub = self._task.result()
        if pubsub is not None:
            await self._pool.give_back(pubsub, self._channel)


class SyncPubSubPool:
    """:class:`PubSubPool` for threads: the same promises, safe to share between them."""

    def __init__(self, client: redis.Redis, *, keep: int = DEFAULT_KEEP) -> None:
        self._client = client
        self._keep = keep
        self._idle: list[SyncPubSub] = []
        self._lock = threading.Lock()

    @property
    def idle(self) -> int:
        """Connections waiting for a stream."""
        return len(self._idle)

    def _take(self, channel: str) -> SyncPubSub:
        """See :meth:`PubSubPool._take`."""
        with self._lock:
            pubsub = self._idle.pop() if self._idle else self._client.pubsub()
        try:
            pubsub.subscribe(channel)
        except BaseException:
            pubsub.close()
            raise
        return pubsub

    def pending(self, channel: str) -> PendingSubscription:
        """A subscription to ``channel`` with its SUBSCRIBE sent and its confirmation
        still to read (:meth:`PendingSubscription.confirm`), so that its round trip
        overlaps other work."""
        try:
            return PendingSubscription(self, channel, self._take(channel))
        except redis.RedisError:
            return PendingSubscription(self, channel, None)

    @contextlib.contextmanager
    def subscribed(self, channel: str, *, taken: SyncPubSub | None = None) -> Iterator[SyncPubSub]:
        """See :meth:`PubSubPool.subscribed`."""
        pubsub = taken if taken is not None else self._take(channel)
        try:
            yield pubsub
        except BaseException:
            pubsub.close()
            raise
        self.give_back(pubsub, channel)

    def close(self) -> None:
        """Close the idle connections."""
        with self._lock:
            idle, self._idle = self._idle, []
        for pubsub in idle:
            pubsub.close()

    def give_back(self, pubsub: SyncPubSub, channel: str) -> None:
        """See :meth:`PubSubPool.give_back`."""
        if len(self._idle) >= self._keep:  # no room (a reader without a pool: keep=0)
            pubsub.close()
            return
        try:
            pubsub.unsubscribe(channel)  # type: ignore[no-untyped-call, unused-ignore]
        except BaseException as exc:  # what is on the connection is unknown
            pubsub.close()
            if isinstance(exc, redis.RedisError):
                return
            raise
        with self._lock:  # another stream may have taken the last place meanwhile
            if len(self._idle) < self._keep:
                self._idle.append(pubsub)
                return
        pubsub.close()


class PendingSubscription:
    """A subscription whose SUBSCRIBE is sent, its confirmation read later.

    A producer sends it before the job's message and reads the confirmation just before
    the job's row is written: no event can be published sooner (a worker publishes
    only after claiming the row), so the subscription still hears every event, and its
    round trip is off the way to the first token.
    """

    def __init__(self, pool: SyncPubSubPool, channel: str, pubsub: SyncPubSub | None) -> None:
        self._pool = pool
        self._channel = channel
        self._pubsub = pubsub
        self._confirmed = False

    def confirm(self, timeout: float = CONFIRM_WAIT_S) -> None:
        """Read Redis's confirmation (once; later calls do nothing)."""
        if self._confirmed:
            return
        self._confirmed = True
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            self._pubsub = _read_confirmation(pubsub, self._channel, timeout)

    def take(self) -> SyncPubSub | None:
        """The confirmed subscription, now the caller's; None if there is none (Redis
        failed, or it was never confirmed: then it goes back to the pool)."""
        if not self._confirmed:
            self.give_back()
        pubsub, self._pubsub = self._pubsub, None
        return pubsub

    def give_back(self) -> None:
        """Return the subscription unread, confirmed or not."""
        pubsub, self._pubsub = self._pubsub, None
        if pubsub is not None:
            self._pool.give_back(pubsub, self._channel)


def _read_confirmation(pubsub: SyncPubSub, channel: str, timeout: float) -> SyncPubSub | None:
    """``pubsub`` once its confirmation of ``channel`` is read; None (closed) if Redis
    fails or does not confirm within ``timeout`` seconds."""
    try:
        message = own_sync_message(pubsub, channel, timeout)
    except BaseException as exc:
        pubsub.close()
        if isinstance(exc, redis.RedisError):
            return None
        raise
    if message is None or message.get("type") != "subscribe":
        pubsub.close()
        return None
    return pubsub


def own_sync_message(pubsub: SyncPubSub, channel: str, timeout: float) -> dict[str, Any] | None:
    """:func:`own_message` for a :class:`SyncPubSubPool`'s connections."""
    while True:
        message = pubsub.get_message(timeout=timeout)
        if message is None or _channel_of(message) == channel:
            return message  # type: ignore[no-any-return]


async def own_message(pubsub: PubSub, channel: str, timeout: float) -> dict[str, Any] | None:
    """The next message of ``channel`` (a confirmation or an event), or None after
    ``timeout`` seconds of silence on it; another channel's leftovers are skipped."""
    while True:
        message = await pubsub.get_message(timeout=timeout)
        if message is None or _channel_of(message) == channel:
            return message  # type: ignore[no-any-return]


def _channel_of(message: dict[str, Any]) -> str:
    channel = message.get("channel")
    return channel.decode() if isinstance(channel, bytes) else str(channel)
