"""``POST /v1/completions`` at the gateway: what it serves, what it refuses by name, the
raw prompt the job carries, the legacy shapes it answers in, and the worker encoding
the prompt without the chat template."""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from types import SimpleNamespace
from typing import Any, cast

import pytest
from pydantic import ValidationError

from producer.gateway.metrics import GatewayMetrics
from producer.gateway.protocol.common import JobAnswer
from producer.gateway.protocol.text_completions import (
    DEFAULT_MAX_TOKENS,
    CompletionRequest,
    legacy_logprobs,
    text_chunk,
    text_completion,
)
from producer.gateway.serving.common import StreamRead
from producer.gateway.serving.text_completions import completion_sse_events
from producer.submission import parse_request, request_hash
from schemas.events import (
    AnyEvent,
    AttemptEvent,
    FinalEvent,
    Timings,
    TokenEvent,
    TokenLogprob,
    TopLogprob,
    Usage,
)
from schemas.requests import EnqueueOptions, GenerationRequest
from workers.job_input import prompt_ids
from workers.worker_runtime import WorkerRuntime

BODY: dict[str, Any] = {"model": "auto", "prompt": "Once upon a time"}


def refusal(body: dict[str, Any]) -> list[tuple[str, str]]:
    with pytest.raises(ValidationError) as caught:
        CompletionRequest.model_validate(body)
    return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in caught.value.errors()]


def llmq_request(**fields: Any) -> dict[str, Any]:
    return CompletionRequest.model_validate({**BODY, **fields}).to_llmq()


def test_the_prompt_becomes_a_raw_prompt_with_openais_default_length() -> None:
    assert llmq_request() == {
        "messages": [{"role": "user", "content": "Once upon a time"}],
        "raw_prompt": True,
        "max_tokens": DEFAULT_MAX_TOKENS,
    }
    assert llmq_request(prompt=["Once upon a time"])["messages"][0]["content"] == (
        "Once upon a time"
    )
    request = parse_request(llmq_request())
    assert request.raw_prompt and request.max_tokens == 16


def test_sampling_fields_travel_as_for_chat() -> None:
    request = llmq_request(
        max_tokens=40,
        temperature=0,
        top_p=0.5,
        stop="\n",
        seed=3,
        presence_penalty=0.5,
        frequency_penalty=-0.5,
        logprobs=2,
        logit_bias={"42": -100},
        user="u-1",
        top_k=5,
        min_p=0.1,
        repetition_penalty=1.2,
        min_tokens=2,
        structured_outputs={"choice": ["yes", "no"]},
        metadata={"ticket": "8812"},
    )
    parsed = parse_request(request)
    assert (parsed.max_tokens, parsed.temperature, parsed.top_p) == (40, 0.0, 0.5)
    assert (parsed.stop, parsed.seed, parsed.user) == (["\n"], 3, "u-1")
    assert parsed.metadata == {"ticket": "8812"}
    sampling = parsed.sampling
    assert sampling is not None
    assert (sampling.presence_penalty, sampling.frequency_penalty) == (0.5, -0.5)
    assert (sampling.logprobs, sampling.logit_bias) == (2, {42: -100.0})
    assert (sampling.top_k, sampling.min_p, sampling.repetition_penalty) == (5, 0.1, 1.2)
    assert sampling.min_tokens == 2
    assert sampling.structured is not None and sampling.structured.choice == ["yes", "no"]
    fmt = {"type": "json_object"}
    assert llmq_request(response_format=fmt)["sampling"] == {"structured": {"kind": "json_object"}}
    assert llmq_request(logprobs=0)["sampling"] == {"logprobs": 0}


@pytest.mark.parametrize(
    ("fields", "where", "says"),
    [
        ({"prompt": ["one", "two"]}, "prompt", "one prompt per request, not 2"),
        ({"prompt": [1, 2, 3]}, "prompt", "not token ids"),
        ({"prompt": [[1, 2]]}, "prompt", "not token ids"),
        ({"prompt": "   "}, "prompt", "must not be empty"),
        ({"prompt": "a\x00b"}, "prompt", "NUL"),
        ({"echo": True}, "echo", "llmq does not serve echo"),
        ({"suffix": "end"}, "suffix", "llmq does not serve suffix"),
        ({"best_of": 2}, "best_of", "llmq does not serve best_of"),
        ({"n": 17}, "n", "less than or equal to 16"),
        ({"logprobs": 21}, "logprobs", "less than or equal to 20"),
        ({"logprobs": True}, "logprobs", "valid integer"),
        ({"logit_bias": {"hello": 1}}, "logit_bias", "token ids"),
        ({"temprature": 0}, "temprature", "Extra inputs are not permitted"),
        ({"messages": [{"role": "user", "content": "hi"}]}, "messages", "Extra inputs"),
        ({"system_prompt": "support"}, "system_prompt", "Extra inputs"),
    ],
)
def test_what_is_not_served_is_refused_by_name(
    fields: dict[str, Any], where: str, says: str
) -> None:
    problems = refusal({**BODY, **fields})
    assert len(problems) == 1, problems
    assert problems[0][0] == where
    assert says in problems[0][1]


@pytest.mark.parametrize(
    ("name", "value"), [("echo", False), ("suffix", None), ("suffix", ""), ("best_of", 1)]
)
def test_quiet_values_of_unserved_fields_are_accepted(name: str, value: object) -> None:
    assert llmq_request(**{name: value}) == llmq_request()


def test_a_prompt_longer_than_a_message_may_be_is_invalid() -> None:
    body = CompletionRequest.model_validate({**BODY, "prompt": "x" * 11})
    body.check_bounds(max_message_chars=11)
    with pytest.raises(Exception, match="prompt is 11 characters long, at most 10"):
        body.check_bounds(max_message_chars=10)


# The job's request ---------------------------------------------------------------


def test_a_raw_prompt_is_one_user_message_without_a_system_prompt() -> None:
    GenerationRequest.from_prompt("The capital of France is")
    two = [{"role": "user", "content": "a"}, {"role": "user", "content": "b"}]
    with pytest.raises(ValidationError, match="one user message"):
        GenerationRequest.model_validate({"messages": two, "raw_prompt": True})
    with pytest.raises(ValidationError, match="without a system_prompt"):
        GenerationRequest.from_prompt("x", system_prompt="support")


def test_a_chat_request_is_stored_and_hashed_as_before() -> None:
    chat = GenerationRequest.from_text("hi")
    assert "raw_prompt" not in chat.model_dump(mode="json")
    assert GenerationRequest.model_validate({**chat.model_dump(), "raw_prompt": False}) == chat
    raw = GenerationRequest.from_prompt("hi")
    assert raw.model_dump(mode="json")["raw_prompt"] is True
    options = EnqueueOptions()
    assert request_hash(raw, options) != request_hash(chat, options)


class _Engine:
    def render_chat(self, messages: list[dict[str, str]]) -> list[int]:
        return [1] * len(messages)

    def render_prompt(self, text: str) -> list[int]:
        return [7] * len(text.split())


def test_the_worker_encodes_a_raw_prompt_without_the_chat_template() -> None:
    runtime = cast(WorkerRuntime, SimpleNamespace(engine=_Engine()))
    assert prompt_ids(GenerationRequest.from_prompt("one two three"), runtime) == [7, 7, 7]
    assert prompt_ids(GenerationRequest.from_text("one two three"), runtime) == [1]


# The answer's shapes ---------------------------------------------------------------


def _token(text: str, logprob: float, *alternatives: tuple[str, float]) -> TokenLogprob:
    return TokenLogprob(
        token=text,
        logprob=logprob,
        top_logprobs=[TopLogprob(token=t, logprob=lp) for t, lp in alternatives],
    )


def test_legacy_logprobs_are_parallel_lists_with_offsets() -> None:
    tokens = [_token(" Paris", -0.1, (" Paris", -0.1), (" Lyon", -3.0)), _token(".", -0.5)]
    assert legacy_logprobs(tokens, top=1, offset=4) == {
        "tokens": [" Paris", "."],
        "token_logprobs": [-0.1, -0.5],
        "top_logprobs": [{" Paris": -0.1, " Lyon": -3.0}, {".": -0.5}],
        "text_offset": [4, 10],
    }
    # logprobs=0: each position holds the chosen token alone, as OpenAI defines it.
    assert legacy_logprobs(tokens, top=0)["top_logprobs"] == [{" Paris": -0.1}, {".": -0.5}]


def test_a_text_completion_and_its_chunks_have_openais_shape() -> None:
    usage = Usage(prompt_tokens=4, completion_tokens=2)
    answer = JobAnswer(
        job_id="j1",
        model="small",
        text=" Paris.",
        finish_reason="length",
        usage=usage,
        timings=Timings(queue_wait_ms=1, total_ms=2),
        tier="small",
    )
    body = text_completion(answer)
    assert body["id"] == "cmpl-j1" and body["object"] == "text_completion"
    assert body["choices"] == [
        {"index": 0, "text": " Paris.", "logprobs": None, "finish_reason": "length"}
    ]
    assert body["usage"]["total_tokens"] == 6
    chunk = text_chunk(job_id="j1", model="small", text=" Par")
    assert chunk["object"] == "text_completion"
    assert chunk["choices"][0] == {
        "index": 0,
        "text": " Par",
        "logprobs": None,
        "finish_reason": None,
    }
    assert text_chunk(job_id="j1", model="small", usage=usage)["choices"] == []


class _Handle:
    job_id = "j1"

    def __init__(self, events: list[AnyEvent]) -> None:
        self._events = events

    async def events(self, *, from_seq: int, timeout: float) -> AsyncIterator[AnyEvent]:
        for event in self._events[from_seq:]:
            yield event


def _stream(events: list[AnyEvent], **options: Any) -> list[Any]:
    async def read() -> list[bytes]:
        read = StreamRead(
            model="small",
            from_seq=options.get("from_seq", 0),
            include_usage=options.get("include_usage", False),
            metrics=GatewayMetrics(),
            started=0.0,
            timeout=1.0,
        )
        chunks = completion_sse_events(
            cast(Any, _Handle(events)), read, logprobs=options.get("logprobs")
        )
        return [chunk async for chunk in chunks]

    out = []
    for raw in asyncio.run(read()):
        lines = raw.decode().strip().splitlines()
        data = lines[-1].removeprefix("data: ")
        event_id = lines[0].removeprefix("id: ") if len(lines) > 1 else None
        out.append((event_id, data if data == "[DONE]" else json.loads(data)))
    return out


EVENTS: list[AnyEvent] = [
    TokenEvent(seq=0, text=" Par", logprobs=[_token(" Par", -0.2)]),
    AttemptEvent(seq=1, attempt=2, resumed_chars=4),
    TokenEvent(seq=2, text="is", logprobs=[_token("is", -0.3)]),
    FinalEvent(
        seq=3,
        text=" Paris",
        finish_reason="stop",
        usage=Usage(prompt_tokens=3, completion_tokens=2),
        timings=Timings(queue_wait_ms=1, total_ms=2),
        worker_id="w",
    ),
]


def test_a_stream_is_text_chunks_then_the_finish_then_done() -> None:
    out = _stream(EVENTS, include_usage=True)
    assert [event_id for event_id, _ in out] == ["j1.0", "j1.2", "j1.3", "j1.3", None]
    texts = [body["choices"][0]["text"] for _, body in out[:3]]
    assert texts == [" Par", "is", ""]
    assert out[2][1]["choices"][0]["finish_reason"] == "stop"
    assert out[3][1]["usage"]["completion_tokens"] == 2
    assert out[-1][1] == "[DONE]"


def test_a_resumed_stream_with_logprobs_counts_offsets_from_the_start() -> None:
    out = _stream(EVENTS, from_seq=2, logprobs=0)
    assert [event_id for event_id, _ in out] == ["j1.2", "j1.3", None]
    logprobs = out[0][1]["choices"][0]["logprobs"]
    assert logprobs["tokens"] == ["is"] and logprobs["text_offset"] == [4]
