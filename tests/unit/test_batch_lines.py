"""Batch lines, windows and status, with no services."""

from __future__ import annotations

import io
import json
from datetime import UTC, datetime, timedelta

import pytest

from producer.batches.lines import LineInvalid, parse_line, peek_custom_id
from producer.batches.status import BatchStatus, Tally, next_status, parse_window
from producer.batches.uploads import stored_line
from schemas.errors import InvalidRequest
from schemas.progress import ProgressBar

BODY = {"model": "auto", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
NOW = datetime(2026, 12, 1, tzinfo=UTC)
LATER = NOW + timedelta(hours=1)


def raw(**fields: object) -> str:
    base: dict[str, object] = {
        "custom_id": "a",
        "method": "POST",
        "url": "/v1/chat/completions",
        "body": BODY,
    }
    base.update(fields)
    return json.dumps({k: v for k, v in base.items() if v is not None})


def test_a_good_line_becomes_an_llmq_request() -> None:
    line = parse_line(raw(body={**BODY, "model": "small", "stop": "x"}))
    assert line.custom_id == "a" and line.model == "small"
    assert line.request["messages"] == [{"role": "user", "content": "hi"}]
    assert line.request["max_tokens"] == 4 and line.request["stop"] == ["x"]


@pytest.mark.parametrize(
    ("text", "code", "words"),
    [
        ("{nope", "invalid_request", "not valid JSON"),
        ("[1, 2]", "invalid_request", "JSON object"),
        (raw(custom_id=None), "invalid_request", "custom_id"),
        (raw(custom_id=""), "invalid_request", "custom_id"),
        (raw(custom_id="x" * 201), "invalid_request", "longer"),
        (raw(method="GET"), "invalid_request", "POST"),
        (raw(url="/v1/embeddings"), "invalid_request", "endpoint"),
        (raw(body="hello"), "invalid_request", "body"),
        (raw(body={**BODY, "model": "gpt-4o"}), "model_not_found", "unknown model"),
        (raw(body={**BODY, "stream": True}), "invalid_request", "stream"),
        (raw(body={**BODY, "messages": []}), "invalid_request", "messages"),
        (raw(body={**BODY, "n": 17}), "invalid_request", "n"),
    ],
)
def test_a_malformed_line_names_its_problem(text: str, code: str, words: str) -> None:
    with pytest.raises(LineInvalid) as caught:
        parse_line(text)
    assert caught.value.code == code
    assert words in str(caught.value)


def test_message_bounds_apply_per_line() -> None:
    long = raw(body={**BODY, "messages": [{"role": "user", "content": "x" * 50}]})
    with pytest.raises(LineInvalid, match="characters"):
        parse_line(long, max_message_chars=10)


def test_custom_ids_are_peeked_without_raising() -> None:
    assert peek_custom_id(raw()) == "a"
    assert peek_custom_id("{nope") is None
    assert peek_custom_id(raw(custom_id=7)) is None


def test_stored_lines_note_repeats_and_undecodable_bytes() -> None:
    seen: set[str] = set()
    first = stored_line("f", 0, raw().encode() + b"\n", seen)
    again = stored_line("f", 1, raw().encode(), seen)
    binary = stored_line("f", 2, b"\xff\xfe\n", seen)
    assert first["problem"] is None and first["custom_id"] == "a"
    assert first["content"] == raw()
    assert "repeats" in again["problem"]
    assert "UTF-8" in binary["problem"]
    # An over-long line is refused with the whole upload (tests/integration/
    # test_gateway_stalls.py), never read whole nor stored.


@pytest.mark.parametrize(("window", "hours"), [("24h", 24), ("30m", 0.5), ("2d", 48), ("3600s", 1)])
def test_windows(window: str, hours: float) -> None:
    assert parse_window(window) == timedelta(hours=hours)


@pytest.mark.parametrize("window", ["", "24", "1w", "8d", "0h", "-1h", "24 h"])
def test_bad_windows_are_refused(window: str) -> None:
    with pytest.raises(InvalidRequest):
        parse_window(window)


def tally(**counts: int) -> Tally:
    base = {"total": 4, "handled": 4, "invalid": 0, "done": 0, "ended": 0, "unfinished": 0}
    base.update(counts)
    return Tally(**base)


def status(
    current: BatchStatus, counts: Tally, *, now: datetime = NOW, enqueuing: bool = False
) -> BatchStatus:
    return next_status(current, counts, now=now, expires_at=LATER, enqueuing=enqueuing)


def test_a_batch_completes_when_every_line_has_a_result() -> None:
    running = BatchStatus.IN_PROGRESS
    assert status(running, tally(done=3, unfinished=1)) is running
    assert status(running, tally(handled=2, done=2)) is running  # lines still to send
    assert status(running, tally(done=3, invalid=1)) is BatchStatus.COMPLETED
    assert tally(done=2, invalid=1, ended=1).failed == 2


def test_a_batch_of_only_invalid_lines_fails() -> None:
    assert status(BatchStatus.IN_PROGRESS, tally(invalid=4)) is BatchStatus.FAILED


def test_validating_moves_on_once_lines_are_sent() -> None:
    assert status(BatchStatus.VALIDATING, tally(handled=0)) is BatchStatus.VALIDATING
    assert status(BatchStatus.VALIDATING, tally(handled=1, unfinished=1)) is BatchStatus.IN_PROGRESS


def test_the_window_expires_a_running_batch() -> None:
    late = LATER + timedelta(seconds=1)
    assert status(BatchStatus.IN_PROGRESS, tally(unfinished=4), now=late) is BatchStatus.EXPIRED
    assert status(BatchStatus.VALIDATING, tally(handled=0), now=late) is BatchStatus.EXPIRED


def test_cancelling_ends_once_nothing_runs_and_no_one_enqueues() -> None:
    cancelling = BatchStatus.CANCELLING
    assert status(cancelling, tally(unfinished=1)) is cancelling
    assert status(cancelling, tally(handled=1), enqueuing=True) is cancelling
    assert status(cancelling, tally(handled=1, ended=1)) is BatchStatus.CANCELLED


@pytest.mark.parametrize(
    "final",
    [BatchStatus.COMPLETED, BatchStatus.FAILED, BatchStatus.EXPIRED, BatchStatus.CANCELLED],
)
def test_final_statuses_stay(final: BatchStatus) -> None:
    late = LATER + timedelta(days=1)
    assert status(final, tally(unfinished=2), now=late) is final


def test_the_progress_bar() -> None:
    # llmq batch submit's bar: lines enqueued of the batch's total.
    out = io.StringIO()
    bar = ProgressBar("enqueued", 10, unit="lines", stream=out, tty=False)
    assert bar.render().startswith("enqueued [" + "." * 30 + "] 0/10 lines 0%")
    bar(5, 10)
    assert "5/10 lines 50%" in bar.render()
    bar(10, 10)
    assert "[" + "#" * 30 + "] 10/10 lines 100%" in out.getvalue().splitlines()[-1]
