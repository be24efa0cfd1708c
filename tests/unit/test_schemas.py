from __future__ import annotations

import pytest
from pydantic import ValidationError

from schemas.events import (
    ErrorEvent,
    FinalEvent,
    Timings,
    TokenEvent,
    Usage,
    is_terminal,
    parse_event,
)
from schemas.requests import EnqueueOptions, GenerationRequest


def test_minimal_request_gets_documented_defaults() -> None:
    request = GenerationRequest.from_text("Where is my order?")
    assert request.messages[0].role == "user"
    assert request.max_tokens == 256
    assert request.temperature == 0.7
    assert request.system_prompt is None


@pytest.mark.parametrize(
    ("payload", "problem"),
    [
        ({"messages": []}, "at least 1 item"),
        ({"messages": [{"role": "user", "content": "   "}]}, "must not be empty"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "at least one user message"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "role"),
        ({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 0}, "greater than"),
        ({"messages": [{"role": "user", "content": "hi"}], "temperature": 5}, "less than"),
        ({"messages": [{"role": "user", "content": "hi"}], "tier": "large"}, "Extra inputs"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "system_prompt": "Bad Name!"},
            "pattern",
        ),
    ],
)
def test_bad_requests_name_the_problem(payload: dict[str, object], problem: str) -> None:
    with pytest.raises(ValidationError, match=problem):
        GenerationRequest.model_validate(payload)


def test_enqueue_options_accept_auto_and_known_values_only() -> None:
    assert EnqueueOptions().tier == "auto"
    assert EnqueueOptions(tier="large", priority="batch").priority == "batch"
    with pytest.raises(ValidationError):
        EnqueueOptions(tier="huge")
    with pytest.raises(ValidationError):
        EnqueueOptions(priority="urgent")
    with pytest.raises(ValidationError):
        EnqueueOptions.model_validate({"messages": []})


def test_stream_events_round_trip_through_json() -> None:
    final = FinalEvent(
        seq=3,
        text="abc",
        usage=Usage(prompt_tokens=4, completion_tokens=3),
        timings=Timings(queue_wait_ms=1.0, ttft_ms=2.0, total_ms=3.0),
        worker_id="small-1@host",
    )
    for event in (TokenEvent(seq=0, text="a"), ErrorEvent(seq=1, message="boom"), final):
        assert parse_event(event.model_dump_json()) == event
    assert not is_terminal(TokenEvent(seq=0, text="a"))
    assert is_terminal(final)


@pytest.mark.parametrize("raw", [b"not json", b"{}", b'{"type": "token", "seq": -1, "text": ""}'])
def test_malformed_events_are_rejected(raw: bytes) -> None:
    with pytest.raises(ValidationError):
        parse_event(raw)


@pytest.mark.parametrize(
    "fields",
    [
        {"messages": [{"role": "user", "content": "hi\x00there"}]},
        {"messages": [{"role": "user", "content": "hi"}], "conversation_id": "c\x001"},
    ],
)
def test_a_nul_in_stored_text_is_refused_at_the_edge(fields: dict[str, object]) -> None:
    from pydantic import ValidationError

    from schemas.requests import GenerationRequest

    with pytest.raises(ValidationError, match="NUL"):
        GenerationRequest.model_validate(fields)
