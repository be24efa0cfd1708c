"""Reading a job's stream events: live over pub/sub, gap-free thanks to the replay log.

Pub/sub is at-most-once: a subscriber that joins late or reconnects misses messages.
So every event is also appended to a Redis list whose index is the sequence number.
A reader subscribes first, then replays the list from the sequence it wants, then
follows pub/sub; any gap or silence is filled from the list. Events come out exactly
once, in order, ending with the terminal event.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import redis
import redis.asyncio as aioredis
from pydantic import ValidationError

from schemas.errors import BrokerUnavailable, JobTimeout
from schemas.events import ErrorEvent, FinalEvent, TokenEvent, is_terminal, parse_event
from schemas.queues import event_channel, event_log_key

Event = TokenEvent | FinalEvent | ErrorEvent
TerminalLookup = Callable[[int], FinalEvent | ErrorEvent | None]

# With no pub/sub message for this long, re-read the log (covers a missed
# message) and ask the database whether the job already ended.
IDLE_POLL_S = 1.0


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
) -> Iterator[Event]:
    """Yield a job's events from ``from_seq`` to the terminal one.

    Raises ``JobTimeout`` after ``timeout`` seconds, ``BrokerUnavailable`` if Redis fails.
    """
    deadline = None if timeout is None else time.monotonic() + timeout
    seq = Sequencer(from_seq)
    log_key = event_log_key(job_id)
    try:
        with client.pubsub() as pubsub:  # type: ignore[no-untyped-call]
            pubsub.subscribe(event_channel(job_id))
            _await_subscribed(pubsub, deadline, job_id)
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
    except redis.RedisError as exc:
        raise BrokerUnavailable(f"lost the stream of job {job_id}: {exc}") from exc


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
    deadline = None if timeout is None else time.monotonic() + timeout
    seq = Sequencer(from_seq)
    log_key = event_log_key(job_id)
    pubsub = client.pubsub()
    try:
        await pubsub.subscribe(event_channel(job_id))
        await _aawait_subscribed(pubsub, deadline, job_id)
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
    except redis.RedisError as exc:
        raise BrokerUnavailable(f"lost the stream of job {job_id}: {exc}") from exc
    finally:
        await pubsub.aclose()  # type: ignore[no-untyped-call]


async def _aawait_subscribed(pubsub: Any, deadline: float | None, job_id: str) -> None:
    while True:
        _check_deadline(deadline, job_id)
        message = await pubsub.get_message(timeout=_remaining(deadline))
        if message is not None and message.get("type") == "subscribe":
            return
