"""Several choices (``n``) in one job: the request carries ``n``, events keep each choice
apart, the gateway's answers and streams show each under its index, and the client's
result keeps each choice's text and log probabilities."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any, cast

import pytest
from pydantic import ValidationError

from producer.batches.views import output_line
from producer.gateway.metrics import GatewayMetrics
from producer.gateway.protocol import chat as oai
from producer.gateway.protocol.chat import ChatCompletionRequest
from producer.gateway.protocol.common import JobAnswer
from producer.gateway.protocol.text_completions import CompletionRequest, text_completion
from producer.gateway.serving.chat import chat_choice_events
from producer.gateway.serving.common import StreamRead
from producer.gateway.serving.text_completions import completion_sse_events
from producer.handles import result_from_terminal
from producer.jobs import terminal_event_from_row
from producer.submission import parse_request
from schemas.events import (
    AnyEvent,
    ChoiceOutput,
    FinalEvent,
    Timings,
    TokenEvent,
    TokenLogprob,
    Usage,
    parse_event,
)
from schemas.queues import Priority, Tier
from schemas.requests import GenerationRequest
from schemas.tables import Job

HI = [{"role": "user", "content": "hi"}]
USAGE = Usage(prompt_tokens=3, completion_tokens=4)
TIMINGS = Timings(queue_wait_ms=1, total_ms=2)
CHOICES = [
    ChoiceOutput(index=0, text="ab", finish_reason="stop"),
    ChoiceOutput(index=1, text="cd", finish_reason="length"),
]


def test_n_reaches_the_jobs_request_and_one_choice_is_stored_as_before() -> None:
    body = ChatCompletionRequest.model_validate({"model": "auto", "messages": HI, "n": 3})
    assert parse_request(body.to_llmq()).n == 3
    one = ChatCompletionRequest.model_validate({"model": "auto", "messages": HI, "n": 1})
    assert "n" not in one.to_llmq()
    assert "n" not in GenerationRequest.from_text("hi", n=1).model_dump(mode="json")
    text = CompletionRequest.model_validate({"model": "auto", "prompt": "x", "n": 2})
    assert parse_request(text.to_llmq()).n == 2


def test_too_many_choices_or_choices_with_tools_are_refused() -> None:
    with pytest.raises(ValidationError, match="less than or equal to 16"):
        ChatCompletionRequest.model_validate({"model": "auto", "messages": HI, "n": 17})
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {}}}]
    with pytest.raises(ValidationError, match="n above 1 is not served with tools"):
        GenerationRequest.from_text("hi", n=2, tools=tools)


def test_events_of_one_choice_are_what_they_were() -> None:
    token = TokenEvent(seq=0, text="hi")
    assert json.loads(token.model_dump_json()) == {"type": "token", "seq": 0, "text": "hi"}
    final = FinalEvent(
        seq=1, text="hi", usage=USAGE, timings=TIMINGS, worker_id="w", finish_reason="stop"
    )
    assert "choices" not in json.loads(final.model_dump_json())
    second = TokenEvent(seq=2, text="x", index=1, finish_reason="stop")
    assert parse_event(second.model_dump_json()) == second


def _answer(choices: list[ChoiceOutput]) -> JobAnswer:
    return JobAnswer(
        job_id="j",
        model="small",
        text="ab",
        finish_reason="stop",
        usage=USAGE,
        timings=TIMINGS,
        tier="small",
        choices=choices,
    )


def test_a_chat_answer_has_one_choice_each() -> None:
    choices = [
        CHOICES[0].model_copy(update={"logprobs": [TokenLogprob(token="ab", logprob=-1)]}),
        CHOICES[1],
    ]
    body = oai.completion(_answer(choices), logprobs=[])
    assert [(c["index"], c["message"]["content"], c["finish_reason"]) for c in body["choices"]] == [
        (0, "ab", "stop"),
        (1, "cd", "length"),
    ]
    assert body["choices"][0]["logprobs"]["content"][0]["token"] == "ab"
    assert body["choices"][1]["logprobs"] == {"content": [], "refusal": None}


def test_a_text_completion_has_one_choice_each() -> None:
    body = text_completion(_answer(CHOICES))
    assert [(c["index"], c["text"], c["logprobs"]) for c in body["choices"]] == [
        (0, "ab", None),
        (1, "cd", None),
    ]


def test_the_result_keeps_each_choices_text_and_logprobs() -> None:
    final = FinalEvent(
        seq=5,
        text="ab",
        finish_reason="stop",
        usage=USAGE,
        timings=TIMINGS,
        worker_id="w",
        choices=CHOICES,
    )
    first = [TokenLogprob(token="ab", logprob=-1)]
    second = [TokenLogprob(token="cd", logprob=-2)]
    result = result_from_terminal(
        "j", Tier.SMALL, Priority.INTERACTIVE, final, logprobs={0: first, 1: second}
    )
    assert result.text == "ab" and result.logprobs == first
    assert result.choices is not None
    assert [(c.text, c.finish_reason, c.logprobs) for c in result.choices] == [
        ("ab", "stop", first),
        ("cd", "length", second),
    ]


def _row(**fields: Any) -> Job:
    return Job(
        id="j",
        tier="small",
        priority="batch",
        status="done",
        routing={"requested": "auto"},
        request={"messages": HI, "n": 2},
        output_text="ab",
        finish_reason="stop",
        prompt_tokens=3,
        completion_tokens=4,
        custom_id="line-1",
        **fields,
    )


def test_a_stored_job_gives_back_every_choice() -> None:
    row = _row(output_choices=[c.model_dump(mode="json") for c in CHOICES])
    final = terminal_event_from_row(row, 9)
    assert isinstance(final, FinalEvent) and final.choices == CHOICES
    line = json.loads(output_line(row))
    texts = [c["message"]["content"] for c in line["response"]["body"]["choices"]]
    assert texts == ["ab", "cd"]
    single = terminal_event_from_row(_row(), 9)
    assert isinstance(single, FinalEvent) and single.choices is None


class _Handle:
    job_id = "j"

    def __init__(self, events: list[AnyEvent]) -> None:
        self._events = events

    async def events(self, *, from_seq: int, timeout: float) -> AsyncIterator[AnyEvent]:
        for event in self._events[from_seq:]:
            yield event


TWO: list[AnyEvent] = [
    TokenEvent(seq=0, text="a", index=0),
    TokenEvent(seq=1, text="c", index=1),
    TokenEvent(seq=2, text="b", index=0, finish_reason="stop"),
    TokenEvent(seq=3, text="d", index=1, finish_reason="length"),
    FinalEvent(
        seq=4,
        text="ab",
        finish_reason="stop",
        usage=USAGE,
        timings=TIMINGS,
        worker_id="w",
        choices=CHOICES,
    ),
]


def _read(stream: Any) -> list[tuple[str | None, Any]]:
    async def read() -> list[bytes]:
        return [chunk async for chunk in stream]

    out = []
    for raw in asyncio.run(read()):
        lines = raw.decode().strip().splitlines()
        data = lines[-1].removeprefix("data: ")
        event_id = lines[0].removeprefix("id: ") if len(lines) > 1 else None
        out.append((event_id, data if data == "[DONE]" else json.loads(data)))
    return out


def _read_options(from_seq: int, *, include_usage: bool) -> StreamRead:
    return StreamRead(
        model="small",
        from_seq=from_seq,
        include_usage=include_usage,
        metrics=GatewayMetrics(),
        started=0.0,
        timeout=1.0,
    )


def _chat(from_seq: int = 0) -> list[tuple[str | None, Any]]:
    return _read(
        chat_choice_events(cast(Any, _Handle(TWO)), _read_options(from_seq, include_usage=True))
    )


def test_a_chat_stream_of_two_choices_opens_and_ends_each() -> None:
    out = _chat()
    choices = [(body["choices"][0] if body["choices"] else None) for _, body in out[:-2]]
    assert [(c["index"], c["delta"], c["finish_reason"]) for c in choices] == [
        (0, {"role": "assistant", "content": "a"}, None),
        (1, {"role": "assistant", "content": "c"}, None),
        (0, {"content": "b"}, None),
        (0, {}, "stop"),
        (1, {"content": "d"}, None),
        (1, {}, "length"),
    ]
    assert out[-2][1]["usage"]["completion_tokens"] == 4 and out[-2][1]["choices"] == []
    assert out[-1] == (None, "[DONE]")


def test_a_resumed_chat_stream_of_choices_sends_no_role_again() -> None:
    out = _chat(from_seq=2)
    assert [event_id for event_id, _ in out] == ["j.2", "j.2", "j.3", "j.3", "j.4", None]
    assert out[0][1]["choices"][0]["delta"] == {"content": "b"}


def test_a_text_stream_of_two_choices_counts_offsets_per_choice() -> None:
    events: list[AnyEvent] = [
        TokenEvent(seq=0, text="ab", index=0, logprobs=[TokenLogprob(token="ab", logprob=-1)]),
        TokenEvent(
            seq=1,
            text="cd",
            index=1,
            finish_reason="stop",
            logprobs=[TokenLogprob(token="cd", logprob=-1)],
        ),
        TokenEvent(
            seq=2,
            text="e",
            index=0,
            finish_reason="stop",
            logprobs=[TokenLogprob(token="e", logprob=-1)],
        ),
        TWO[-1],
    ]
    out = _read(
        completion_sse_events(
            cast(Any, _Handle(events)), _read_options(0, include_usage=False), logprobs=0
        )
    )
    pieces = [body["choices"][0] for _, body in out[:-1]]
    assert [(p["index"], p["text"], p["finish_reason"]) for p in pieces] == [
        (0, "ab", None),
        (1, "cd", None),
        (1, "", "stop"),
        (0, "e", None),
        (0, "", "stop"),
    ]
    assert pieces[3]["logprobs"]["text_offset"] == [2]
    assert pieces[1]["logprobs"]["text_offset"] == [0]
