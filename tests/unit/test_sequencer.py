from __future__ import annotations

from producer.streams import Sequencer
from schemas.events import ErrorEvent, TokenEvent


def raw_tokens(start: int, count: int) -> list[str]:
    return [TokenEvent(seq=start + i, text=str(start + i)).model_dump_json() for i in range(count)]


def test_takes_consecutive_events_once() -> None:
    seq = Sequencer()
    assert [e.seq for e in seq.take(raw_tokens(0, 3), 0)] == [0, 1, 2]
    # Replaying an overlap yields only what is new.
    assert [e.seq for e in seq.take(raw_tokens(0, 5), 0)] == [3, 4]
    assert seq.next_seq == 5


def test_starts_where_the_reader_asks() -> None:
    seq = Sequencer(next_seq=2)
    assert [e.seq for e in seq.take(raw_tokens(2, 2), 2)] == [2, 3]
    assert not seq.wants(1)
    assert seq.wants(4)


def test_stops_after_the_terminal_event() -> None:
    seq = Sequencer()
    events = [
        *raw_tokens(0, 1),
        ErrorEvent(seq=1, message="x").model_dump_json(),
        *raw_tokens(2, 1),
    ]
    taken = seq.take(events, 0)
    assert [e.seq for e in taken] == [0, 1]
    assert seq.finished


def test_a_corrupt_log_entry_becomes_an_error_event() -> None:
    seq = Sequencer()
    (event,) = seq.take([b"garbage"], 0)
    assert isinstance(event, ErrorEvent)
    assert "corrupt" in event.message
