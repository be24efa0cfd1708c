"""OpenAI's chat fields at the gateway: each served, ignored knowingly, or refused by
name; what is served reaches the job's request, the engine's options and vLLM."""

from __future__ import annotations

import queue
from typing import Any

import pytest
from pydantic import ValidationError

from producer.batches.lines import LineInvalid, parse_line
from producer.gateway.protocol import chat as oai
from producer.gateway.protocol.chat import UNSERVED_FIELDS, ChatCompletionRequest
from producer.gateway.protocol.common import JobAnswer
from producer.submission import parse_request, request_hash
from schemas.errors import InvalidRequest
from schemas.events import Timings, TokenEvent, TokenLogprob, TopLogprob, Usage, parse_event
from schemas.requests import EnqueueOptions, GenerationRequest
from schemas.sampling import Sampling, StructuredOutput
from workers.engine.base import Delta, SamplingOptions
from workers.engine.vllm import _coalesce, sampling_params, token_logprobs
from workers.job_input import sampling_options

HI = [{"role": "user", "content": "hi"}]
BODY: dict[str, Any] = {"model": "auto", "messages": HI}


def refusal(body: dict[str, Any]) -> list[tuple[str, str]]:
    """(where, message) of each problem the gateway's model finds in ``body``."""
    with pytest.raises(ValidationError) as caught:
        ChatCompletionRequest.model_validate(body)
    return [(".".join(str(p) for p in e["loc"]), e["msg"]) for e in caught.value.errors()]


def llmq_request(**fields: Any) -> dict[str, Any]:
    return ChatCompletionRequest.model_validate({**BODY, **fields}).to_llmq()


# No silent drops ------------------------------------------------------------------


@pytest.mark.parametrize("name", ["temperatur", "guided_json", "best_of", "echo", "tier"])
def test_an_unknown_field_is_refused_by_name(name: str) -> None:
    assert refusal({**BODY, name: 1}) == [(name, "Extra inputs are not permitted")]


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("functions", [{"name": "f"}]),
        ("function_call", "auto"),
        ("modalities", ["text", "audio"]),
        ("audio", {"voice": "alloy", "format": "wav"}),
        ("prediction", {"type": "content", "content": "x"}),
        ("web_search_options", {}),
        ("reasoning_effort", "low"),
        ("verbosity", "low"),
        ("service_tier", "flex"),
    ],
)
def test_an_unserved_field_that_asks_for_something_is_refused_by_name(
    name: str, value: object
) -> None:
    [(where, message)] = refusal({**BODY, name: value})
    assert where == name
    assert f"llmq does not serve {name}" in message


@pytest.mark.parametrize(
    ("name", "value"),
    [(name, quiet) for name, values in UNSERVED_FIELDS.items() for quiet in values],
)
def test_an_unserved_field_at_its_default_is_served_as_if_absent(name: str, value: object) -> None:
    # Client libraries send some defaults (functions=[], service_tier="auto", ...).
    assert llmq_request(**{name: value}) == llmq_request()
    assert llmq_request(**{name: None}) == llmq_request()


def test_fields_ignored_knowingly_are_accepted() -> None:
    assert llmq_request(store=True, prompt_cache_key="k") == llmq_request()


@pytest.mark.parametrize(
    ("message", "expected"),
    [
        ({"role": "user", "content": "hi", "name": "bob"}, "llmq does not serve messages[0].name"),
        (
            {"role": "user", "content": "hi", "colour": "red"},
            "messages[0].colour is not a field of a chat message",
        ),
        (
            {"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]},
            "llmq serves text content parts only: messages[0].content[0] is image_url",
        ),
        (
            {"role": "user", "content": ["hi"]},
            "llmq serves text content parts only: messages[0].content[0] is a non-object",
        ),
    ],
)
def test_what_a_message_asks_for_beyond_text_is_refused_by_name(
    message: dict[str, Any], expected: str
) -> None:
    assert refusal({**BODY, "messages": [message]}) == [("messages", expected)]


def test_an_earlier_answer_echoed_back_with_empty_keys_is_served() -> None:
    # What the SDK's assistant message dumps to: every key present, the unserved empty.
    echoed = {
        "role": "assistant",
        "content": "Hello!",
        "refusal": None,
        "tool_calls": [],
        "function_call": None,
        "audio": None,
    }
    request = llmq_request(messages=[*HI, echoed, *HI])
    assert request["messages"][1] == {"role": "assistant", "content": "Hello!"}


def test_a_batch_line_with_an_unserved_field_is_invalid_by_name() -> None:
    line = '{"custom_id": "a", "body": {"model": "auto", "messages": [], "functions": [{}]}}'
    with pytest.raises(LineInvalid, match="functions: llmq does not serve functions"):
        parse_line(line.replace("[]", '[{"role": "user", "content": "hi"}]', 1))


# Served sampling fields -------------------------------------------------------------


def test_penalties_extras_and_user_become_the_requests_sampling() -> None:
    request = llmq_request(
        presence_penalty=0.5,
        frequency_penalty=-0.25,
        top_k=20,
        min_p=0.05,
        repetition_penalty=1.2,
        min_tokens=4,
        stop="END",
        seed=7,
        user="end-user-1",
    )
    parsed = parse_request(request)
    assert parsed.sampling == Sampling(
        presence_penalty=0.5,
        frequency_penalty=-0.25,
        top_k=20,
        min_p=0.05,
        repetition_penalty=1.2,
        min_tokens=4,
    )
    assert parsed.stop == ["END"]
    assert parsed.seed == 7
    assert parsed.user == "end-user-1"


def test_safety_identifier_is_recorded_as_the_user_unless_user_is_given() -> None:
    assert llmq_request(safety_identifier="s")["user"] == "s"
    assert llmq_request(safety_identifier="s", user="u")["user"] == "u"


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        ({"presence_penalty": 2.5}, "presence_penalty"),
        ({"frequency_penalty": -3}, "frequency_penalty"),
        ({"repetition_penalty": 0}, "repetition_penalty"),
        ({"top_k": -2}, "top_k"),
        ({"min_p": 1.5}, "min_p"),
        ({"min_tokens": -1}, "min_tokens"),
        ({"min_tokens": 10, "max_tokens": 5}, "min_tokens"),
        ({"user": "a\x00b"}, "user"),
    ],
)
def test_out_of_range_sampling_is_an_invalid_request(fields: dict[str, Any], problem: str) -> None:
    with pytest.raises(InvalidRequest, match=problem):
        parse_request(llmq_request(**fields))


def test_a_request_without_the_new_options_is_stored_and_hashed_as_before() -> None:
    # A job message or row written before these options existed still parses, and a
    # request that uses none of them has the same stored form (older workers run it).
    old = {
        "messages": HI,
        "system_prompt": None,
        "max_tokens": 256,
        "temperature": 0.7,
        "top_p": 1.0,
        "stop": [],
        "seed": None,
        "conversation_id": None,
        "metadata": {},
    }
    parsed = GenerationRequest.model_validate(old)
    assert parsed.sampling is None and parsed.user is None
    assert parsed.model_dump(mode="json") == old
    # Options that change nothing are no options.
    defaults = GenerationRequest.model_validate({**old, "sampling": {"top_k": 0}})
    assert defaults.model_dump(mode="json") == old
    options = EnqueueOptions()
    assert request_hash(defaults, options) == request_hash(parsed, options)


# Structured output --------------------------------------------------------------------

SCHEMA = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
    "additionalProperties": False,
}


@pytest.mark.parametrize(
    ("fields", "structured"),
    [
        ({"response_format": {"type": "text"}}, None),
        ({"response_format": {"type": "json_object"}}, StructuredOutput(kind="json_object")),
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "place", "schema": SCHEMA, "strict": True},
                }
            },
            StructuredOutput(kind="json_schema", json_schema=SCHEMA),
        ),
        (
            {"structured_outputs": {"choice": ["yes", "no"]}},
            StructuredOutput(kind="choice", choice=["yes", "no"]),
        ),
        (
            {"structured_outputs": {"regex": "[0-9]{3}"}},
            StructuredOutput(kind="regex", regex="[0-9]{3}"),
        ),
        (
            {"structured_outputs": {"json": SCHEMA}},
            StructuredOutput(kind="json_schema", json_schema=SCHEMA),
        ),
    ],
)
def test_response_format_and_structured_outputs_become_one_constraint(
    fields: dict[str, Any], structured: StructuredOutput | None
) -> None:
    sampling = parse_request(llmq_request(**fields)).sampling
    assert (sampling.structured if sampling else None) == structured


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"response_format": {"type": "json_schema"}}, "response_format"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"name": "x"}}},
            "response_format.json_schema.schema",
        ),
        ({"response_format": {"type": "structural_tag"}}, "response_format.type"),
        ({"response_format": {"type": "json_object", "schema": {}}}, "response_format.schema"),
        ({"structured_outputs": {"choice": ["a"], "regex": "a"}}, "structured_outputs"),
        ({"structured_outputs": {"grammar": "root ::= 'a'"}}, "structured_outputs.grammar"),
        (
            {
                "structured_outputs": {"choice": ["a"]},
                "response_format": {"type": "json_object"},
            },
            "",
        ),
    ],
)
def test_a_malformed_constraint_is_refused_where_it_is(fields: dict[str, Any], where: str) -> None:
    problems = refusal({**BODY, **fields})
    assert any(place.startswith(where) for place, _ in problems), problems


@pytest.mark.parametrize(
    ("fields", "problem"),
    [
        (
            {
                "response_format": {
                    "type": "json_schema",
                    "json_schema": {"name": "x", "schema": {"type": "objekt"}},
                }
            },
            "not a valid JSON schema at type",
        ),
        (
            {"structured_outputs": {"json": {"properties": {"a": {"minimum": "zero"}}}}},
            "not a valid JSON schema at properties/a/minimum",
        ),
        ({"structured_outputs": {"regex": "a(b"}}, "regex does not compile"),
    ],
)
def test_a_constraint_the_engine_could_not_compile_is_an_invalid_request(
    fields: dict[str, Any], problem: str
) -> None:
    # Refused where the request comes in (a 400), not failed by the worker (a 500).
    with pytest.raises(InvalidRequest, match=problem):
        parse_request(llmq_request(**fields))


def test_a_constraint_takes_only_what_its_kind_needs() -> None:
    with pytest.raises(ValidationError, match="only choice"):
        StructuredOutput(kind="choice", regex="a")
    with pytest.raises(ValidationError, match="none of"):
        StructuredOutput(kind="json_object", json_schema={})
    with pytest.raises(ValidationError, match="surrogate"):
        StructuredOutput(kind="json_schema", json_schema={"\ud800": 1})


# To the engine ----------------------------------------------------------------------


def test_the_worker_passes_sampling_to_vllm() -> None:
    request = parse_request(
        llmq_request(
            presence_penalty=0.5,
            frequency_penalty=0.25,
            top_k=20,
            min_p=0.05,
            repetition_penalty=1.2,
            min_tokens=4,
            stop=["END", "STOP"],
            seed=3,
            temperature=0.5,  # greedy sampling (0) would clear top_k and min_p in vLLM
        )
    )
    params = sampling_params(sampling_options(request, "interactive"))
    assert (params.presence_penalty, params.frequency_penalty) == (0.5, 0.25)
    assert (params.top_k, params.min_p, params.repetition_penalty) == (20, 0.05, 1.2)
    assert params.min_tokens == 4
    assert params.stop == ["END", "STOP"]
    assert params.seed == 3
    assert params.structured_outputs is None


def test_a_resumed_attempt_owes_only_the_rest_of_min_tokens() -> None:
    request = parse_request(llmq_request(min_tokens=10, max_tokens=20))
    options = sampling_options(request, "interactive", done_tokens=4)
    assert options.max_tokens == 16
    assert options.sampling is not None and options.sampling.min_tokens == 6
    later = sampling_options(request, "interactive", done_tokens=12)
    assert later.sampling is not None and later.sampling.min_tokens == 0


def test_defaults_reach_vllm_as_its_own_defaults() -> None:
    params = sampling_params(SamplingOptions(max_tokens=8))
    assert (params.presence_penalty, params.frequency_penalty, params.repetition_penalty) == (
        0.0,
        0.0,
        1.0,
    )
    assert (params.top_k, params.min_p, params.min_tokens) == (0, 0.0, 0)


@pytest.mark.parametrize(
    ("structured", "field", "value"),
    [
        (StructuredOutput(kind="json_object"), "json_object", True),
        (StructuredOutput(kind="json_schema", json_schema=SCHEMA), "json", SCHEMA),
        (StructuredOutput(kind="choice", choice=["yes", "no"]), "choice", ["yes", "no"]),
        (StructuredOutput(kind="regex", regex="[0-9]+"), "regex", "[0-9]+"),
    ],
)
def test_a_constraint_reaches_vllm_as_its_structured_outputs(
    structured: StructuredOutput, field: str, value: object
) -> None:
    options = SamplingOptions(max_tokens=8, sampling=Sampling(structured=structured))
    params = sampling_params(options).structured_outputs
    assert getattr(params, field) == value


# Log probabilities ---------------------------------------------------------------------


def test_logprobs_and_top_logprobs_become_the_requests_sampling() -> None:
    assert parse_request(llmq_request(logprobs=True)).sampling == Sampling(logprobs=0)
    sampling = parse_request(llmq_request(logprobs=True, top_logprobs=5)).sampling
    assert sampling == Sampling(logprobs=5)
    assert "sampling" not in llmq_request(logprobs=False, top_logprobs=0)


@pytest.mark.parametrize(
    ("fields", "where"),
    [
        ({"top_logprobs": 3}, ""),
        ({"logprobs": True, "top_logprobs": 21}, "top_logprobs"),
        ({"logprobs": "yes please"}, "logprobs"),
    ],
)
def test_malformed_logprobs_are_refused(fields: dict[str, Any], where: str) -> None:
    problems = refusal({**BODY, **fields})
    assert any(place == where for place, _ in problems), problems


class _Logprob:
    def __init__(self, logprob: float, rank: int, token: str) -> None:
        self.logprob, self.rank, self.decoded_token = logprob, rank, token


class _Completion:
    """What vLLM's ``CompletionOutput`` holds for two tokens, top 2 asked."""

    token_ids = (7, 9)
    logprobs = (
        {7: _Logprob(-0.1, 1, "Hi"), 8: _Logprob(-2.5, 2, "Hello")},
        # The sampled token ranks third: reported beside the top two.
        {5: _Logprob(-0.5, 1, "!"), 6: _Logprob(-1.5, 2, "."), 9: _Logprob(-3.0, 3, " é")},
    )


def test_vllms_logprobs_become_each_tokens_logprob_and_its_alternatives() -> None:
    first, second = token_logprobs(_Completion(), 2)
    assert first == TokenLogprob(
        token="Hi",
        logprob=-0.1,
        bytes=list(b"Hi"),
        top_logprobs=[
            TopLogprob(token="Hi", logprob=-0.1, bytes=list(b"Hi")),
            TopLogprob(token="Hello", logprob=-2.5, bytes=list(b"Hello")),
        ],
    )
    assert (second.token, second.logprob, second.bytes) == (" é", -3.0, list(" é".encode()))
    assert [top.token for top in second.top_logprobs] == ["!", "."]
    assert token_logprobs(_Completion(), None) == ()
    assert [t.top_logprobs for t in token_logprobs(_Completion(), 0)] == [[], []]


def test_logprobs_reach_vllm_only_when_asked() -> None:
    assert sampling_params(SamplingOptions(max_tokens=4)).logprobs is None
    asked = SamplingOptions(max_tokens=4, sampling=Sampling(logprobs=3))
    assert sampling_params(asked).logprobs == 3


def test_coalesced_deltas_keep_every_tokens_logprob_in_order() -> None:
    one, two = (TokenLogprob(token=t, logprob=-1.0) for t in ("a", "b"))
    waiting: queue.SimpleQueue[Any] = queue.SimpleQueue()
    waiting.put(Delta("b", 2, False, logprobs=(two,)))
    merged, _ = _coalesce(Delta("a", 1, False, logprobs=(one,)), waiting)
    assert (merged.text, merged.logprobs) == ("ab", (one, two))


def test_a_token_event_without_logprobs_is_what_it_was() -> None:
    assert TokenEvent(seq=0, text="hi").model_dump_json() == '{"type":"token","seq":0,"text":"hi"}'
    with_logprobs = TokenEvent(seq=0, text="hi", logprobs=[TokenLogprob(token="hi", logprob=-1)])
    assert parse_event(with_logprobs.model_dump_json()) == with_logprobs


def test_openai_choices_carry_logprobs_only_when_asked() -> None:
    usage = Usage(prompt_tokens=1, completion_tokens=1)
    timings = Timings(queue_wait_ms=0, total_ms=1)
    fields: dict[str, Any] = {
        "job_id": "j",
        "model": "small",
        "text": "hi",
        "finish_reason": "stop",
        "usage": usage,
        "timings": timings,
        "tier": "small",
    }
    assert oai.completion(JobAnswer(**fields))["choices"][0]["logprobs"] is None
    token = TokenLogprob(token="hi", logprob=-0.5, bytes=[104, 105])
    block = oai.completion(JobAnswer(**fields), logprobs=[token])["choices"][0]["logprobs"]
    assert block == {
        "content": [{"token": "hi", "logprob": -0.5, "bytes": [104, 105], "top_logprobs": []}],
        "refusal": None,
    }
    chunk = oai.chunk(job_id="j", model="small", delta={"content": "hi"}, logprobs=[token])
    assert chunk["choices"][0]["logprobs"] == block


def test_logit_bias_becomes_token_ids_and_reaches_vllm() -> None:
    request = parse_request(llmq_request(logit_bias={"42": 5.5, "7": -100}))
    assert request.sampling == Sampling(logit_bias={42: 5.5, 7: -100.0})
    # Stored as JSON (string keys), read back as token ids.
    assert GenerationRequest.model_validate_json(request.model_dump_json()) == request
    params = sampling_params(sampling_options(request, "interactive"))
    assert params.logit_bias == {42: 5.5, 7: -100.0}
    assert "sampling" not in llmq_request(logit_bias={})


@pytest.mark.parametrize("bias", [{"word": 1}, {"-3": 1}, {"1.5": 1}, {"12345678901": 1}])
def test_a_logit_bias_key_that_is_not_a_token_id_is_refused(bias: dict[str, float]) -> None:
    assert [where for where, _ in refusal({**BODY, "logit_bias": bias})] == ["logit_bias"]


def test_a_logit_bias_past_100_is_an_invalid_request() -> None:
    with pytest.raises(InvalidRequest, match="logit_bias"):
        parse_request(llmq_request(logit_bias={"5": 101}))
