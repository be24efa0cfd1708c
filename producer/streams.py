"""Reading a job's stream events: live over pub/sub, gap-free thanks to the replay log.

Pub/sub is at-most-once: a subscriber that joins late or reconnects misses messages.
So every event is also appended to a Redis list whose index is the sequence number.
A reader subscribes first, then replays the list from the sequence it wants, then
follows pub/sub; any gap or silence is filled from the list. Events come out exactly
once, in order, ending with the terminal event.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import AsyncIterator, Callable, Generator
from dataclasses import dataclass
from typing import Any

import redis
import redis.asyncio as aioredis
from pydantic import ValidationError

from schemas.boundary import broker_error
from schemas.errors import JobTimeout
from schemas.events import AnyEvent, ErrorEvent, TerminalEvent, is_terminal, parse_event
from schemas.queues import CANCEL_CHANNEL, cancel_key, event_channel, event_log_key

Event = AnyEvent
TerminalLookup = Callable[[int], TerminalEvent | None]

# With no pub/sub message for this long, re-read the log (covers a missed
# message) and ask the database whether the job already ended.
IDLE_POLL_S = 1.0
# A reader rides out a Redis restart or failover of up to this long.
RECONNECT_BUDGET_S = 30.0
RECONNECT_DELAY_S = 0.5


class Sequencer:
    """Keeps events in order and exactly once; pure logic shared by both readers."""

    def __init__(self, next_seq: int = 0) -> None:
        self.next_seq = next_seq
        self.finished = False

    def wants(self, seq: int) -> bool:
        """True if ``seq`` is the next event the reader needs."""
        return seq == self.next_seq and not self.finished

    def take(self, raw_events: list[Any], first_seq: int) -> list[Event]:
        """Accept consecutive raw events starting at ``first_seq``; drop what is known."""
        accepted: list[Event] = []
        for offset, raw in enumerate(raw_events):
            if not self.wants(first_seq + offset):
                continue
            event = _decode(raw, first_seq + offset)
            accepted.append(event)
            self.next_seq += 1
            self.finished = is_terminal(event)
        return accepted


def _decode(raw: Any, seq: int) -> Event:
    try:
        return parse_event(raw)
    except ValidationError:
        return ErrorEvent(seq=seq, message=f"stream event {seq} is corrupt")


def _pubsub_seq(message: dict[str, Any] | None) -> tuple[int, Any] | None:
    if message is None or message.get("type") != "message":
        return None
    try:
        return parse_event(message["data"]).seq, message["data"]
    except ValidationError:
        return None


def _remaining(deadline: float | None) -> float:
    return (
        IDLE_POLL_S if deadline is None else max(0.0, min(IDLE_POLL_S, deadline - time.monotonic()))
    )


def _check_deadline(deadline: float | None, job_id: str) -> None:
    if deadline is not None and time.monotonic() >= deadline:
        raise JobTimeout(f"job {job_id} did not finish in time; it keeps running")


def read_events(
    client: redis.Redis,
    job_id: str,
    *,
    from_seq: int = 0,
    timeout: float | None = None,
    terminal_lookup: TerminalLookup | None = None,
) -> Generator[Event, None, None]:
    """Yield a job's events from ``from_seq`` to the terminal one.

    A lost Redis connection is re-opened and reading goes on from the next sequence
    number, so a Redis restart costs the reader nothing. Raises ``JobTimeout`` after
    ``timeout`` seconds, ``BrokerUnavailable`` if Redis stays away ``RECONNECT_BUDGET_S``.
    """
    reading = Reading.start(job_id, from_seq, timeout, terminal_lookup)
    while not reading.seq.finished:
        try:
            yield from _follow(client, reading)
        except redis.RedisError as exc:
            _check_deadline(reading.deadline, job_id)
            time.sleep(reading.outage.wait_or_raise(exc))


@dataclass
class Reading:
    """One reader's place in a stream, kept across reconnects."""

    job_id: str
    seq: Sequencer
    deadline: float | None
    terminal_lookup: TerminalLookup | None
    outage: Outage

    @classmethod
    def start(
        cls,
        job_id: str,
        from_seq: int,
        timeout: float | None,
        terminal_lookup: TerminalLookup | None,
    ) -> Reading:
        deadline = None if timeout is None else time.monotonic() + timeout
        return cls(job_id, Sequencer(from_seq), deadline, terminal_lookup, Outage(job_id))

    def unpack(self) -> tuple[str, Sequencer, float | None, TerminalLookup | None]:
        return self.job_id, self.seq, self.deadline, self.terminal_lookup


class Outage:
    """How long a reader has been without Redis; raises once that is too long."""

    def __init__(self, job_id: str) -> None:
        self._job_id = job_id
        self._since: float | None = None

    def over(self) -> None:
        self._since = None

    def wait_or_raise(self, exc: redis.RedisError) -> float:
        """Seconds to wait before reconnecting; raises ``BrokerUnavailable`` past the budget."""
        now = time.monotonic()
        if self._since is None:
            self._since = now
        if now - self._since > RECONNECT_BUDGET_S:
            raise broker_error(exc, doing=f"follow the stream of job {self._job_id}") from exc
        return RECONNECT_DELAY_S


def _follow(client: redis.Redis, reading: Reading) -> Generator[Event, None, None]:
    job_id, seq, deadline, terminal_lookup = reading.unpack()
    log_key = event_log_key(job_id)
    with client.pubsub() as pubsub:  # type: ignore[no-untyped-call]
        pubsub.subscribe(event_channel(job_id))
        _await_subscribed(pubsub, deadline, job_id)
        reading.outage.over()
        yield from seq.take(client.lrange(log_key, seq.next_seq, -1), seq.next_seq)
        while not seq.finished:
            _check_deadline(deadline, job_id)
            found = _pubsub_seq(pubsub.get_message(timeout=_remaining(deadline)))
            if found is not None and seq.wants(found[0]):
                yield from seq.take([found[1]], found[0])
            elif found is None or found[0] > seq.next_seq:
                yield from seq.take(client.lrange(log_key, seq.next_seq, -1), seq.next_seq)
                if found is None and not seq.finished:
                    yield from _from_row(seq, terminal_lookup)


def _await_subscribed(pubsub: Any, deadline: float | None, job_id: str) -> None:
    # The log must be read only once the subscription is live, or an event
    # published in between would be in neither.
    while True:
        _check_deadline(deadline, job_id)
        message = pubsub.get_message(timeout=_remaining(deadline))
        if message is not None and message.get("type") == "subscribe":
            return


def _from_row(seq: Sequencer, terminal_lookup: TerminalLookup | None) -> list[Event]:
    if terminal_lookup is None:
        return []
    terminal = terminal_lookup(seq.next_seq)
    if terminal is None:
        return []
    seq.finished = True
    seq.next_seq += 1
    return [terminal]


async def aread_events(
    client: aioredis.Redis,
    job_id: str,
    *,
    from_seq: int = 0,
    timeout: float | None = None,
    terminal_lookup: TerminalLookup | None = None,
) -> AsyncIterator[Event]:
    """Asyncio twin of :func:`read_events`, with the same guarantees."""
    reading = Reading.start(job_id, from_seq, timeout, terminal_lookup)
    while not reading.seq.finished:
        try:
            async for event in _afollow(client, reading):
                yield event
        except redis.RedisError as exc:
            _check_deadline(reading.deadline, job_id)
            await asyncio.sleep(reading.outage.wait_or_raise(exc))


async def _afollow(client: aioredis.Redis, reading: Reading) -> AsyncIterator[Event]:
    job_id, seq, deadline, terminal_lookup = reading.unpack()
    log_key = event_log_key(job_id)
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(event_channel(job_id))
        await _aawait_subscribed(pubsub, deadline, job_id)
        reading.outage.over()
        for event in seq.take(await client.lrange(log_key, seq.next_seq, -1), seq.next_seq):
            yield event
        while not seq.finished:
            _check_deadline(deadline, job_id)
            message = await pubsub.get_message(timeout=_remaining(deadline))
            found = _pubsub_seq(message)
            batch: list[Event] = []
            if found is not None and seq.wants(found[0]):
                batch = seq.take([found[1]], found[0])
            elif found is None or found[0] > seq.next_seq:
                batch = seq.take(await client.lrange(log_key, seq.next_seq, -1), seq.next_seq)
                if found is None and not seq.finished:
                    batch += _from_row(seq, terminal_lookup)
            for event in batch:
                yield event
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def _aawait_subscribed(pubsub: Any, deadline: float | None, job_id: str) -> None:
    while True:
        _check_deadline(deadline, job_id)
        message = await pubsub.get_message(timeout=_remaining(deadline))
        if message is not None and message.get("type") == "subscribe":
            return


def close_stream(client: redis.Redis, job_id: str, message: str, *, ttl_s: int) -> None:
    """End the stream of a job that no worker holds with an error event saying why."""
    log_key = event_log_key(job_id)
    payload = ErrorEvent(seq=int(client.llen(log_key)), message=message).model_dump_json()
    pipe = client.pipeline(transaction=False)
    pipe.rpush(log_key, payload)
    pipe.expire(log_key, ttl_s)
    pipe.publish(event_channel(job_id), payload)
    pipe.execute()


def request_cancel(client: redis.Redis, job_id: str, *, ttl_s: int) -> None:
    """Ask whichever worker runs ``job_id`` to abort it.

    The key outlives a missed pub/sub message: a worker looks for it after the
    job's first token.
    """
    pipe = client.pipeline(transaction=False)
    pipe.set(cancel_key(job_id), "1", ex=ttl_s)
    pipe.publish(CANCEL_CHANNEL, job_id)
    pipe.execute()
