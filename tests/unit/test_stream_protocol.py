"""The stream-reading protocol, driven by hand: no Redis, no clock but a fake one."""

from __future__ import annotations

from typing import Any

import pytest

from producer.stream_protocol import (
    IDLE_POLL_MAX_S,
    IDLE_POLL_S,
    RECONNECT_BUDGET_S,
    RECONNECT_DELAY_S,
    Listen,
    ReadLog,
    ReadRow,
    StreamReader,
)
from schemas.errors import BrokerUnavailable, JobTimeout
from schemas.events import ErrorEvent, FinalEvent, Timings, TokenEvent, Usage


class FakeClock:
    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


def raw_tokens(start: int, count: int) -> list[str]:
    return [TokenEvent(seq=start + i, text=str(start + i)).model_dump_json() for i in range(count)]


def final(seq: int) -> FinalEvent:
    return FinalEvent(
        seq=seq,
        text="done",
        usage=Usage(prompt_tokens=1, completion_tokens=1),
        timings=Timings(queue_wait_ms=0, total_ms=1),
        worker_id="w",
    )


def message(raw: str | bytes) -> dict[str, Any]:
    return {"type": "message", "data": raw}


SUBSCRIBED: dict[str, Any] = {"type": "subscribe", "data": 1}


def following(reader: StreamReader, log: list[str] | None = None) -> StreamReader:
    """Take ``reader`` through the subscription and the first replay of ``log``."""
    assert isinstance(reader.next_action(), Listen)
    reader.receive_message(SUBSCRIBED)
    assert reader.next_action() == ReadLog(reader.next_seq)
    reader.receive_log(log or [])
    return reader


def seqs(events: list[Any]) -> list[int]:
    return [event.seq for event in events]


def test_listens_until_subscribed_then_replays_the_log_from_where_it_was_asked() -> None:
    reader = StreamReader("j", from_seq=2)
    assert reader.next_action() == Listen(IDLE_POLL_S)
    # Anything before the confirmation is not taken: the log is read after it.
    assert reader.receive_message(None) == []
    assert reader.receive_message(message(raw_tokens(2, 1)[0])) == []
    assert isinstance(reader.next_action(), Listen)
    reader.receive_message(SUBSCRIBED)
    assert reader.next_action() == ReadLog(2)
    assert seqs(reader.receive_log(raw_tokens(2, 2))) == [2, 3]
    assert reader.next_action() == Listen(IDLE_POLL_S)
    assert not reader.wants(1)
    assert reader.wants(4)


def test_takes_consecutive_events_once() -> None:
    reader = following(StreamReader("j"), raw_tokens(0, 3))
    assert reader.next_seq == 3
    # The live copy of an event the log already gave is dropped.
    assert reader.receive_message(message(raw_tokens(2, 1)[0])) == []
    assert seqs(reader.receive_message(message(raw_tokens(3, 1)[0]))) == [3]
    assert reader.next_action() == Listen(IDLE_POLL_S)


def test_a_gap_sends_the_reader_to_the_log_and_back_to_listening() -> None:
    reader = following(StreamReader("j"), raw_tokens(0, 1))
    assert reader.receive_message(message(raw_tokens(3, 1)[0])) == []
    assert reader.next_action() == ReadLog(1)
    assert seqs(reader.receive_log(raw_tokens(1, 3))) == [1, 2, 3]
    assert reader.next_action() == Listen(IDLE_POLL_S)


def test_silence_reads_the_log_then_asks_the_row() -> None:
    reader = following(StreamReader("j"), raw_tokens(0, 2))
    assert reader.receive_message(None) == []
    assert reader.next_action() == ReadLog(2)
    assert reader.receive_log([]) == []
    assert reader.next_action() == ReadRow(2)
    assert reader.receive_row(None) == []
    assert reader.next_action() == Listen(2 * IDLE_POLL_S)  # a silence: wait longer
    reader.receive_message(None)
    reader.receive_log([])
    assert reader.receive_row(final(2)) == []
    # The row says it ended: the log is read once more, and has nothing (it expired).
    assert reader.next_action() == ReadLog(2)
    (terminal,) = reader.receive_log([])
    assert isinstance(terminal, FinalEvent)
    assert reader.finished
    assert reader.next_seq == 3
    assert reader.next_action() is None


def test_a_job_that_streamed_between_the_silent_read_and_the_row_loses_no_token() -> None:
    """The whole answer may land in the log after the silent read of it and before
    the row is read (a short answer while the row's read waits): the row's outcome
    must not skip it."""
    reader = following(StreamReader("j"))
    reader.receive_message(None)
    assert reader.receive_log([]) == []
    assert reader.receive_row(final(3)) == []
    assert reader.next_action() == ReadLog(0)
    # Its tokens are in the log; its own final event not yet (the row ends first).
    assert seqs(reader.receive_log(raw_tokens(0, 3))) == [0, 1, 2]
    assert not reader.finished
    assert reader.next_action() == Listen(IDLE_POLL_S)
    (terminal,) = reader.receive_message(message(final(3).model_dump_json()))
    assert isinstance(terminal, FinalEvent)
    assert reader.finished


def row_says_ended(reader: StreamReader, terminal: FinalEvent) -> StreamReader:
    """Take ``reader`` through a silence, an empty log and a row that says ``terminal``."""
    reader.receive_message(None)
    reader.receive_log([])
    assert reader.receive_row(terminal) == []
    return reader


def test_a_log_that_ends_the_stream_as_the_row_is_confirmed_ends_it_once() -> None:
    reader = row_says_ended(following(StreamReader("j")), final(1))
    events = reader.receive_log([*raw_tokens(0, 1), final(1).model_dump_json()])
    assert seqs(events) == [0, 1]
    assert reader.finished
    assert reader.next_action() is None


def test_a_lost_connection_while_confirming_the_row_forgets_its_outcome() -> None:
    reader = row_says_ended(following(StreamReader("j")), final(0))
    assert reader.connection_lost(ConnectionError("gone")) == RECONNECT_DELAY_S
    assert isinstance(reader.next_action(), Listen)
    reader.receive_message(SUBSCRIBED)
    assert reader.next_action() == ReadLog(0)
    # A replay after the reconnect that finds nothing goes back to listening: the row
    # is asked again only after a silence.
    assert reader.receive_log([]) == []
    assert isinstance(reader.next_action(), Listen)


def test_silence_that_the_log_ends_does_not_ask_the_row() -> None:
    reader = following(StreamReader("j"))
    reader.receive_message(None)
    events = reader.receive_log([*raw_tokens(0, 1), final(1).model_dump_json()])
    assert seqs(events) == [0, 1]
    assert reader.finished
    assert reader.next_action() is None


def test_an_unreadable_live_message_counts_as_silence() -> None:
    reader = following(StreamReader("j"))
    assert reader.receive_message(message(b"garbage")) == []
    assert reader.next_action() == ReadLog(0)
    reader.receive_log([])
    assert reader.next_action() == ReadRow(0)


def test_stops_after_the_terminal_event() -> None:
    reader = StreamReader("j")
    log = [*raw_tokens(0, 1), ErrorEvent(seq=1, message="x").model_dump_json(), *raw_tokens(2, 1)]
    taken = following(reader, log)
    assert taken.finished
    assert reader.next_seq == 2
    assert not reader.wants(2)
    assert reader.next_action() is None


def test_a_terminal_event_live_ends_the_stream() -> None:
    reader = following(StreamReader("j"), raw_tokens(0, 1))
    (event,) = reader.receive_message(message(final(1).model_dump_json()))
    assert isinstance(event, FinalEvent)
    assert reader.next_action() is None


def test_a_corrupt_log_entry_becomes_an_error_event() -> None:
    reader = StreamReader("j")
    reader.receive_message(SUBSCRIBED)
    (event,) = reader.receive_log([b"garbage"])
    assert isinstance(event, ErrorEvent)
    assert "corrupt" in event.message
    assert reader.finished


def test_a_lost_connection_resumes_at_the_next_event() -> None:
    clock = FakeClock()
    reader = following(StreamReader("j", clock=clock), raw_tokens(0, 4))
    reader.receive_message(None)  # mid-way to the log when Redis goes
    assert reader.connection_lost(ConnectionError("gone")) == RECONNECT_DELAY_S
    assert isinstance(reader.next_action(), Listen)
    reader.receive_message(SUBSCRIBED)
    assert reader.next_action() == ReadLog(4)
    # Back from the first replay after a reconnect straight to listening, not to the row.
    assert seqs(reader.receive_log(raw_tokens(4, 1))) == [4]
    assert reader.next_seq == 5
    assert isinstance(reader.next_action(), Listen)


def test_redis_away_past_the_budget_raises_broker_unavailable() -> None:
    clock = FakeClock()
    reader = StreamReader("j", clock=clock)
    reader.connection_lost(ConnectionError("gone"))
    clock.now += RECONNECT_BUDGET_S
    reader.connection_lost(ConnectionError("gone"))
    clock.now += 1
    with pytest.raises(BrokerUnavailable):
        reader.connection_lost(ConnectionError("gone"))


def test_a_confirmed_subscription_ends_the_outage() -> None:
    clock = FakeClock()
    reader = StreamReader("j", clock=clock)
    reader.connection_lost(ConnectionError("gone"))
    clock.now += RECONNECT_BUDGET_S - 1
    reader.receive_message(SUBSCRIBED)
    clock.now += 10
    assert reader.connection_lost(ConnectionError("gone again")) == RECONNECT_DELAY_S


def test_the_timeout_shortens_the_last_wait_then_raises() -> None:
    clock = FakeClock()
    reader = following(StreamReader("j", timeout=2.5, clock=clock))
    assert reader.next_action() == Listen(IDLE_POLL_S)
    clock.now += 2.0
    assert reader.next_action() == Listen(0.5)
    clock.now += 0.5
    with pytest.raises(JobTimeout):
        reader.next_action()
    with pytest.raises(JobTimeout):
        reader.connection_lost(ConnectionError("gone"))


def test_input_out_of_turn_is_refused() -> None:
    reader = StreamReader("j")
    with pytest.raises(RuntimeError):
        reader.receive_log([])
    with pytest.raises(RuntimeError):
        reader.receive_row(None)


def test_a_subscription_confirmed_before_the_job_listens_first_and_takes_event_zero() -> None:
    reader = StreamReader("j", confirmed_before_job=True)
    assert reader.next_action() == Listen(IDLE_POLL_S)
    assert seqs(reader.receive_message(message(raw_tokens(0, 1)[0]))) == [0]
    # Silence still sends it to the log, then the row.
    assert reader.receive_message(None) == []
    assert reader.next_action() == ReadLog(1)


def test_after_a_lost_connection_an_early_reader_subscribes_afresh() -> None:
    reader = StreamReader("j", confirmed_before_job=True)
    reader.receive_message(message(raw_tokens(0, 1)[0]))
    reader.connection_lost(ConnectionError("gone"))
    assert isinstance(reader.next_action(), Listen)
    reader.receive_message(SUBSCRIBED)
    assert reader.next_action() == ReadLog(1)


def test_only_a_read_from_the_first_event_can_have_joined_before_the_job() -> None:
    with pytest.raises(ValueError, match="first event"):
        StreamReader("j", from_seq=3, confirmed_before_job=True)


def test_silences_in_a_row_poll_ever_less_often_until_an_event_comes() -> None:
    """A stream whose job waits in a long queue must not read the log and the row
    every second for minutes; pub/sub still brings its first event at once."""
    reader = following(StreamReader("j"), [])
    waits = []
    for _ in range(6):
        listen = reader.next_action()
        assert isinstance(listen, Listen)
        waits.append(listen.timeout)
        reader.receive_message(None)
        reader.receive_log([])
        reader.receive_row(None)
    assert waits == [IDLE_POLL_S, 2.0, 4.0, IDLE_POLL_MAX_S, IDLE_POLL_MAX_S, IDLE_POLL_MAX_S]
    assert seqs(reader.receive_message(message(raw_tokens(0, 1)[0]))) == [0]
    assert reader.next_action() == Listen(IDLE_POLL_S)
