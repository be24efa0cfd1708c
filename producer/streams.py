"""Reading a job's stream events: thin sync and asyncio drivers of one protocol.

What to read and what it means is decided by :class:`producer.stream_protocol.StreamReader`
(no I/O); these drivers only subscribe, listen, read the replay log and the job's row,
and open a new connection after a lost one. Events come out exactly once, in order,
ending with the terminal event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Awaitable, Callable, Generator

import redis
import redis.asyncio as aioredis

from producer.pubsub_pool import (
    PubSub,
    PubSubPool,
    SyncPubSub,
    SyncPubSubPool,
    own_message,
    own_sync_message,
)
from producer.stream_protocol import (
    RECONNECT_BUDGET_S,
    Listen,
    ReadLog,
    ReadRow,
    StreamReader,
)
from schemas.events import AnyEvent, TerminalEvent, error_event
from schemas.queues import CANCEL_CHANNEL, cancel_key, event_channel, event_log_key
from schemas.stream_log import APPEND_EVENT, EventLog

Event = AnyEvent
TerminalLookup = Callable[[int], TerminalEvent | None]
AsyncTerminalLookup = Callable[[int], Awaitable[TerminalEvent | None]]


def read_events(
    client: redis.Redis,
    job_id: str,
    *,
    from_seq: int = 0,
    timeout: float | None = None,
    terminal_lookup: TerminalLookup | None = None,
    subscriptions: SyncPubSubPool | None = None,
    early: SyncPubSub | None = None,
    reconnect_budget_s: float = RECONNECT_BUDGET_S,
) -> Generator[Event, None, None]:
    """Yield a job's events from ``from_seq`` to the terminal one.

    A lost Redis connection is re-opened and reading goes on from the next sequence
    number, so a Redis restart costs the reader nothing. Raises ``JobTimeout`` after
    ``timeout`` seconds, ``BrokerUnavailable`` if Redis stays away
    ``reconnect_budget_s``. With ``subscriptions``, the pub/sub
    connection comes from (and goes back to) that pool. ``early`` is a subscription to
    the job's channel that Redis confirmed before the job's message was sent
    (``SyncPubSubPool.confirmed``): the first connection, with nothing to read first.
    """
    reader, log_key, channel = _reader(
        job_id, from_seq, timeout, early is not None, reconnect_budget_s
    )
    pool = subscriptions or SyncPubSubPool(client, keep=0)
    while not reader.finished:
        try:
            with pool.subscribed(channel, taken=early) as pubsub:
                early = None  # a reconnect subscribes afresh
                while (action := reader.next_action()) is not None:
                    match action:
                        case Listen(timeout=wait):
                            message = own_sync_message(pubsub, channel, wait)
                            yield from reader.receive_message(message)
                        case ReadLog(start=start):
                            yield from reader.receive_log(client.lrange(log_key, start, -1))
                        case ReadRow(seq=seq):
                            yield from reader.receive_row(_row(terminal_lookup, seq))
        except redis.RedisError as exc:
            time.sleep(reader.connection_lost(exc))


async def aread_events(
    client: aioredis.Redis,
    job_id: str,
    *,
    from_seq: int = 0,
    timeout: float | None = None,
    terminal_lookup: AsyncTerminalLookup | None = None,
    subscriptions: PubSubPool | None = None,
    early: PubSub | None = None,
    reconnect_budget_s: float = RECONNECT_BUDGET_S,
) -> AsyncIterator[Event]:
    """Asyncio twin of :func:`read_events`, with the same guarantees and arguments
    (``terminal_lookup`` is awaited: a database read must not hold up the loop)."""
    reader, log_key, channel = _reader(
        job_id, from_seq, timeout, early is not None, reconnect_budget_s
    )
    pool = subscriptions or PubSubPool(client, keep=0)
    while not reader.finished:
        try:
            async with pool.subscribed(channel, taken=early) as pubsub:
                early = None  # a reconnect subscribes afresh
                while (action := reader.next_action()) is not None:
                    match action:
                        case Listen(timeout=wait):
                            events = reader.receive_message(
                                await own_message(pubsub, channel, wait)
                            )
                        case ReadLog(start=start):
                            events = reader.receive_log(await client.lrange(log_key, start, -1))
                        case ReadRow(seq=seq):
                            events = reader.receive_row(await _arow(terminal_lookup, seq))
                    for event in events:
                        yield event
        except redis.RedisError as exc:
            await asyncio.sleep(reader.connection_lost(exc))


def _reader(
    job_id: str,
    from_seq: int,
    timeout: float | None,
    confirmed_before_job: bool,
    reconnect_budget_s: float,
) -> tuple[StreamReader, str, str]:
    """The protocol reading ``job_id``'s events, and the replay log and the channel it reads."""
    reader = StreamReader(
        job_id,
        from_seq=from_seq,
        timeout=timeout,
        confirmed_before_job=confirmed_before_job,
        reconnect_budget_s=reconnect_budget_s,
    )
    return reader, event_log_key(job_id), event_channel(job_id)


def _row(terminal_lookup: TerminalLookup | None, seq: int) -> TerminalEvent | None:
    return None if terminal_lookup is None else terminal_lookup(seq)


async def _arow(terminal_lookup: AsyncTerminalLookup | None, seq: int) -> TerminalEvent | None:
    return None if terminal_lookup is None else await terminal_lookup(seq)


def close_stream(
    client: redis.Redis,
    job_id: str,
    message: str,
    *,
    ttl_s: int,
    status: str = "failed",
) -> None:
    """End the stream of a job that no worker holds with an error event saying why
    (and how it ended: ``status``)."""
    EventLog(client, job_id, ttl_s=ttl_s).append_next(lambda seq: error_event(seq, message, status))


def close_streams(
    client: redis.Redis,
    job_ids: list[str],
    message: str,
    *,
    ttl_s: int,
    status: str = "failed",
) -> None:
    """:func:`close_stream` for many jobs, a few round trips for all of them: one
    pipeline reads the logs' lengths, one appends each job's error event at its end
    (a log another writer moved on meanwhile is closed one by one)."""
    if not job_ids:
        return
    logs = [EventLog(client, job_id, ttl_s=ttl_s) for job_id in job_ids]
    lengths = client.pipeline(transaction=False)
    lengths.script_load(APPEND_EVENT)  # the appends below name it by its digest
    for job_id in job_ids:
        lengths.llen(event_log_key(job_id))
    seqs = [int(n) for n in lengths.execute()[1:]]
    appends = client.pipeline(transaction=False)
    for log, seq in zip(logs, seqs, strict=True):
        log.queue_append(appends, seq, error_event(seq, message, status).model_dump_json())
    replies = appends.execute(raise_on_error=False)
    for job_id, reply in zip(job_ids, replies, strict=True):
        if isinstance(reply, Exception) or EventLog.appended(int(reply)) is not None:
            close_stream(client, job_id, message, ttl_s=ttl_s, status=status)


def request_cancels(client: redis.Redis, job_ids: list[str], *, ttl_s: int) -> None:
    """:func:`request_cancel` for many jobs, in one pipeline."""
    if not job_ids:
        return
    pipe = client.pipeline(transaction=False)
    for job_id in job_ids:
        pipe.set(cancel_key(job_id), "1", ex=ttl_s)
        pipe.publish(CANCEL_CHANNEL, job_id)
    pipe.execute()


def request_cancel(client: redis.Redis, job_id: str, *, ttl_s: int) -> None:
    """Ask whichever worker runs ``job_id`` to abort it.

    The key outlives a missed pub/sub message: a worker looks for it after the
    job's first token.
    """
    request_cancels(client, [job_id], ttl_s=ttl_s)
