"""The probes of ``llmq bench compat``: one OpenAI feature each, sent over plain HTTP
and checked for the shape a client library reads and the behaviour it relies on, not
just a 200.

A probe is a function of an :class:`~bench.compat_checks.Api` that returns nothing
when the feature works and raises :class:`~bench.compat_checks.ProbeFailed` saying
what was wrong when it does not; the checks of a reply's shape are in
:mod:`bench.compat_checks`. Greedy decoding (temperature 0) makes the behaviour checks
exact: a streamed answer is the plain one, a stop string cuts the free answer where it
first appears.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import httpx

from bench.compat_checks import (
    FINISH_REASONS,
    Api,
    Json,
    ProbeFailed,
    check_completion,
    check_error,
    check_logprobs,
    check_tool_call,
    check_usage,
    content_of,
    expect_ok,
    get,
    parsed_object,
    read_stream,
    repeats,
    require,
)

CAPITAL = [{"role": "user", "content": "What is the capital of Italy? Answer in JSON."}]
REPEAT = [{"role": "user", "content": "Write the word apple twenty times."}]
SHORT = [{"role": "user", "content": "What is 2 + 2?"}]
WEATHER_QUESTION = [{"role": "user", "content": "What is the weather like in Paris?"}]
CAPITAL_SCHEMA: Json = {
    "type": "object",
    "properties": {"capital": {"type": "string", "enum": ["Rome", "Milan", "Paris"]}},
    "required": ["capital"],
    "additionalProperties": False,
}


def _city_tool(name: str, description: str) -> Json:
    """A function tool taking one ``city``; an enum keeps the arguments short enough
    to end well inside max_tokens."""
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"city": {"type": "string", "enum": ["Paris", "Rome", "Berlin"]}},
                "required": ["city"],
                "additionalProperties": False,
            },
        },
    }


WEATHER_TOOL = _city_tool("get_weather", "The current weather in a city.")
TIME_TOOL = _city_tool("get_time", "The current time in a city.")
UNKNOWN_FIELD = "frobnicate_level"
PHONE = "[0-9]{3}-[0-9]{4}"
TEXT_PROMPT = "The capital of France is"


def probe_models(api: Api) -> None:
    body = expect_ok(api.get("/v1/models"))
    require(get(body, "object") == "list", f"object is {body.get('object')!r}")
    data = get(body, "data")
    require(isinstance(data, list), "no data list")
    entries = [m for m in data if isinstance(m, dict) and get(m, "id") == api.model]
    require(len(entries) == 1, f"{api.model!r} is not listed once")
    require(get(entries[0], "object") == "model", "the entry's object is not 'model'")


def probe_chat(api: Api) -> None:
    body = api.greedy()
    require(bool(content_of(body)), "an empty answer")
    require(body["usage"]["completion_tokens"] > 0, "no completion tokens")


def probe_chat_stream(api: Api) -> None:
    streamed = api.chat_stream()
    require(streamed.roles.get(0) == "assistant", "no delta gave the role")
    require(streamed.texts[0] == content_of(api.greedy()), "streamed text differs from plain")
    require(streamed.usage is None, "a usage chunk nobody asked for")


def probe_stream_usage(api: Api) -> None:
    usage = api.chat_stream(max_tokens=8, stream_options={"include_usage": True}).usage
    if usage is None:
        raise ProbeFailed("no usage chunk at the end")
    require(0 < usage["completion_tokens"] <= 8, f"usage {usage}")


def _length_cut(api: Api, field_name: str) -> None:
    request = api.chat_body({field_name: 3})
    if field_name != "max_tokens":
        del request["max_tokens"]
    body = expect_ok(api.post("/v1/chat/completions", request))
    [choice] = check_completion(body)
    require(choice["finish_reason"] == "length", f"finish_reason {choice['finish_reason']!r}")
    tokens = body["usage"]["completion_tokens"]
    require(tokens == 3, f"{tokens} tokens, not 3")


def probe_max_tokens(api: Api) -> None:
    _length_cut(api, "max_tokens")


def probe_max_completion_tokens(api: Api) -> None:
    _length_cut(api, "max_completion_tokens")


def _stop_word(api: Api) -> tuple[str, str]:
    """A word from the middle of the free greedy answer, and the text before it."""
    free = content_of(api.greedy())
    words = free.split()
    require(len(words) >= 4, f"the free answer is too short to cut: {free!r}")
    stop = words[len(words) // 2]
    return stop, free[: free.index(stop)]


def _check_stopped(text: str, finish: str, before: str) -> None:
    require(text == before, f"answer {text!r}, not {before!r}")
    require(finish == "stop", f"finish_reason {finish!r}")


def probe_stop_string(api: Api) -> None:
    stop, before = _stop_word(api)
    [choice] = check_completion(api.chat(stop=stop))
    _check_stopped(choice["message"]["content"], choice["finish_reason"], before)


def probe_stop_list(api: Api) -> None:
    stop, before = _stop_word(api)
    [choice] = check_completion(api.chat(stop=["no such text", stop]))
    _check_stopped(choice["message"]["content"], choice["finish_reason"], before)


def probe_stop_streamed(api: Api) -> None:
    stop, before = _stop_word(api)
    streamed = api.chat_stream(stop=[stop])
    _check_stopped(streamed.texts[0], streamed.finish[0], before)


def probe_seed(api: Api) -> None:
    first = content_of(api.chat(temperature=1.0, seed=11, max_tokens=16))
    again = content_of(api.chat(temperature=1.0, seed=11, max_tokens=16))
    require(bool(first), "an empty answer")
    require(first == again, f"the same seed gave {first!r} and {again!r}")


def _fewer_repeats(api: Api, **penalty: Any) -> None:
    free = content_of(api.greedy(messages=REPEAT, max_tokens=32))
    require(repeats(free) >= 4, f"the free answer does not repeat itself: {free!r}")
    penalised = content_of(api.chat(messages=REPEAT, max_tokens=32, **penalty))
    require(repeats(penalised) < repeats(free), f"as repetitive with {penalty}: {penalised!r}")


def probe_penalties(api: Api) -> None:
    _fewer_repeats(api, presence_penalty=2.0, frequency_penalty=2.0)


def probe_repetition_penalty(api: Api) -> None:
    _fewer_repeats(api, repetition_penalty=2.0)


def probe_top_k(api: Api) -> None:
    # top_k 1 keeps the likeliest token alone: any temperature gives the greedy answer.
    sampled = content_of(api.chat(temperature=1.5, top_k=1))
    require(sampled == content_of(api.greedy()), f"top_k=1 sampled {sampled!r}")


def probe_min_p(api: Api) -> None:
    # min_p 1 keeps only tokens as likely as the likeliest: the greedy answer again.
    sampled = content_of(api.chat(temperature=1.5, min_p=1.0))
    require(sampled == content_of(api.greedy()), f"min_p=1 sampled {sampled!r}")


def probe_min_tokens(api: Api) -> None:
    free = api.greedy(messages=SHORT, max_tokens=48)
    [choice] = check_completion(free)
    require(choice["finish_reason"] == "stop", "the free answer did not end by itself")
    wanted = free["usage"]["completion_tokens"] + 4
    held = api.chat(messages=SHORT, max_tokens=wanted + 8, min_tokens=wanted)
    check_completion(held)
    tokens = held["usage"]["completion_tokens"]
    require(tokens >= wanted, f"{tokens} tokens, min_tokens {wanted}")


def probe_json_object(api: Api) -> None:
    body = api.chat(messages=CAPITAL, max_tokens=64, response_format={"type": "json_object"})
    [choice] = check_completion(body)
    require(choice["finish_reason"] == "stop", f"finish_reason {choice['finish_reason']!r}")
    parsed_object(choice["message"]["content"], "the answer's contents")


def _capital_format() -> Json:
    return {
        "type": "json_schema",
        "json_schema": {"name": "capital", "schema": CAPITAL_SCHEMA, "strict": True},
    }


def _check_capital(text: str) -> None:
    answer = parsed_object(text, "the answer's contents")
    require(set(answer) == {"capital"}, f"keys {sorted(answer)}, not ['capital']")
    require(answer["capital"] in {"Rome", "Milan", "Paris"}, f"capital {answer['capital']!r}")


def probe_json_schema(api: Api) -> None:
    body = api.greedy(messages=CAPITAL, max_tokens=32, response_format=_capital_format())
    [choice] = check_completion(body)
    require(choice["finish_reason"] == "stop", f"finish_reason {choice['finish_reason']!r}")
    _check_capital(choice["message"]["content"])


def probe_json_schema_streamed(api: Api) -> None:
    streamed = api.chat_stream(messages=CAPITAL, max_tokens=32, response_format=_capital_format())
    _check_capital(streamed.texts[0])
    plain = api.greedy(messages=CAPITAL, max_tokens=32, response_format=_capital_format())
    require(streamed.texts[0] == content_of(plain), "streamed text differs from plain")


def probe_invalid_schema(api: Api) -> None:
    not_a_schema = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": 5}}}
    body = api.chat_body({"messages": CAPITAL, "max_tokens": 8, "response_format": not_a_schema})
    check_error(api.post("/v1/chat/completions", body), 400)


def probe_choice(api: Api) -> None:
    body = api.chat(
        messages=[{"role": "user", "content": "Is Rome in Italy?"}],
        max_tokens=8,
        structured_outputs={"choice": ["yes", "no"]},
    )
    require(content_of(body) in {"yes", "no"}, f"answer {content_of(body)!r}")


def probe_regex(api: Api) -> None:
    body = api.chat(
        messages=[{"role": "user", "content": "Give me a phone number."}],
        max_tokens=16,
        structured_outputs={"regex": PHONE},
    )
    require(re.fullmatch(PHONE, content_of(body)) is not None, f"answer {content_of(body)!r}")


def probe_logprobs(api: Api) -> None:
    body = api.chat(max_tokens=8, logprobs=True, top_logprobs=3)
    [choice] = check_completion(body)
    logprobs = get(choice, "logprobs")
    require(isinstance(logprobs, dict), "no logprobs object")
    check_logprobs(
        get(logprobs, "content"),
        choice["message"]["content"],
        top=3,
        completion_tokens=body["usage"]["completion_tokens"],
        ended=choice["finish_reason"] == "stop",
    )


def probe_logprobs_streamed(api: Api) -> None:
    streamed = api.chat_stream(max_tokens=8, logprobs=True, top_logprobs=2)
    check_logprobs(
        streamed.logprobs.get(0),
        streamed.texts[0],
        top=2,
        completion_tokens=None,
        ended=streamed.finish[0] == "stop",
    )


def probe_n(api: Api) -> None:
    body = api.chat(n=2, temperature=1.0, max_tokens=8)
    choices = check_completion(body, n=2)
    for choice in choices:
        require(bool(choice["message"]["content"]), f"choice {choice['index']} is empty")


def probe_n_streamed(api: Api) -> None:
    streamed = api.chat_stream(n=2, temperature=1.0, max_tokens=8)
    require(all(streamed.texts[i] for i in (0, 1)), "a streamed choice is empty")


def _named_choice() -> Json:
    return {"type": "function", "function": {"name": "get_weather"}}


def probe_tools_named(api: Api) -> None:
    body = api.chat(
        messages=WEATHER_QUESTION,
        max_tokens=40,
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice=_named_choice(),
    )
    [choice] = check_completion(body)
    # OpenAI ends a call the request named with "stop", one the model chose with
    # "tool_calls"; either is a finished call.
    finish = choice["finish_reason"]
    require(finish in {"stop", "tool_calls"}, f"finish_reason {finish!r}")
    calls = get(choice["message"], "tool_calls")
    require(isinstance(calls, list) and len(calls) == 1, f"tool_calls {calls!r}")
    arguments = check_tool_call(calls[0], {"get_weather"})
    require(get(arguments, "city") in {"Paris", "Rome", "Berlin"}, f"arguments {arguments}")


def _required_calls(api: Api, **fields: Any) -> list[Any]:
    """The calls of a ``tool_choice: required`` answer, each checked."""
    body = api.chat(
        messages=WEATHER_QUESTION,
        max_tokens=64,
        tools=[WEATHER_TOOL, TIME_TOOL],
        tool_choice="required",
        **fields,
    )
    [choice] = check_completion(body)
    require(choice["finish_reason"] == "tool_calls", f"finish_reason {choice['finish_reason']!r}")
    calls = get(choice["message"], "tool_calls")
    require(isinstance(calls, list) and bool(calls), f"tool_calls {calls!r}")
    for call in calls:
        check_tool_call(call, {"get_weather", "get_time"})
    return list(calls)


def probe_tools_required(api: Api) -> None:
    _required_calls(api)


def probe_tools_one_call(api: Api) -> None:
    calls = _required_calls(api, parallel_tool_calls=False)
    require(len(calls) == 1, f"tool_calls {calls!r}")


def probe_tools_streamed(api: Api) -> None:
    streamed = api.chat_stream(
        messages=WEATHER_QUESTION,
        max_tokens=40,
        tools=[WEATHER_TOOL],
        tool_choice=_named_choice(),
    )
    calls = streamed.tool_calls.get(0, {})
    require(sorted(calls) == [0], f"streamed tool call indexes {sorted(calls)}")
    call = calls[0]
    require(bool(call.id), "the streamed tool call has no id")
    require(call.name == "get_weather", f"streamed tool call names {call.name!r}")
    arguments = parsed_object(call.arguments, "the streamed arguments")
    require(get(arguments, "city") in {"Paris", "Rome", "Berlin"}, f"arguments {arguments}")


def _text_body(api: Api) -> Json:
    return {"model": api.model, "prompt": TEXT_PROMPT, "max_tokens": 6, "temperature": 0}


def check_text_completion(body: Json) -> str:
    """A ``text_completion`` with one choice of text; returns the text."""
    require(get(body, "object") == "text_completion", f"object is {body.get('object')!r}")
    require(isinstance(get(body, "id"), str) and bool(body["id"]), "no id")
    require(isinstance(get(body, "created"), int), "no created time")
    require(isinstance(get(body, "model"), str), "no model")
    choices = get(body, "choices")
    require(isinstance(choices, list) and len(choices) == 1, "not one choice")
    [choice] = choices
    require(get(choice, "index") == 0, "the choice's index is not 0")
    require(get(choice, "finish_reason") in FINISH_REASONS, "no known finish_reason")
    text = get(choice, "text")
    require(isinstance(text, str) and bool(text), "no text")
    check_usage(get(body, "usage"))
    result: str = text
    return result


def _text_completion(api: Api) -> Json:
    return api.remember(
        "/v1/completions", lambda: expect_ok(api.post("/v1/completions", _text_body(api)))
    )


def probe_completions(api: Api) -> None:
    body = _text_completion(api)
    check_text_completion(body)
    require(0 < body["usage"]["completion_tokens"] <= 6, f"usage {body['usage']}")


def probe_completions_streamed(api: Api) -> None:
    reply = api.stream("/v1/completions", _text_body(api))
    streamed = read_stream(reply, text_completion=True)
    plain = check_text_completion(_text_completion(api))
    require(streamed.texts[0] == plain, f"streamed {streamed.texts[0]!r}, plain {plain!r}")


def probe_unknown_field(api: Api) -> None:
    reply = api.post("/v1/chat/completions", api.chat_body({UNKNOWN_FIELD: 3, "max_tokens": 2}))
    check_error(reply, 400, UNKNOWN_FIELD)


def probe_unknown_model(api: Api) -> None:
    body = api.chat_body({"model": "no-such-model", "max_tokens": 2})
    check_error(api.post("/v1/chat/completions", body), 404)


@dataclass(frozen=True)
class Probe:
    """One feature, and the function that tries it."""

    name: str
    feature: str
    run: Callable[[Api], None]


PROBES: tuple[Probe, ...] = (
    Probe("models", "GET /v1/models lists the model", probe_models),
    Probe("chat", "chat completion: shape, text, usage", probe_chat),
    Probe("chat_stream", "streamed chat: chunks, role, [DONE], same text", probe_chat_stream),
    Probe("stream_usage", "stream_options.include_usage: a last usage chunk", probe_stream_usage),
    Probe("max_tokens", "max_tokens cuts with finish_reason length", probe_max_tokens),
    Probe(
        "max_completion_tokens",
        "max_completion_tokens cuts like max_tokens",
        probe_max_completion_tokens,
    ),
    Probe("stop_string", "stop: a string ends the answer before it", probe_stop_string),
    Probe("stop_list", "stop: a list, the first one met", probe_stop_list),
    Probe("stop_streamed", "stop in a stream", probe_stop_streamed),
    Probe("seed", "seed: the same sampled answer twice", probe_seed),
    Probe("penalties", "presence and frequency penalties repeat less", probe_penalties),
    Probe("repetition_penalty", "vLLM's repetition_penalty repeats less", probe_repetition_penalty),
    Probe("top_k", "vLLM's top_k (1: the greedy answer)", probe_top_k),
    Probe("min_p", "vLLM's min_p (1: the greedy answer)", probe_min_p),
    Probe("min_tokens", "vLLM's min_tokens holds off the end", probe_min_tokens),
    Probe("json_object", "response_format json_object parses", probe_json_object),
    Probe("json_schema", "response_format json_schema follows it", probe_json_schema),
    Probe("json_schema_stream", "json_schema streamed, same text", probe_json_schema_streamed),
    Probe("invalid_schema", "a json_schema that is no JSON schema is a 400", probe_invalid_schema),
    Probe("choice", "structured_outputs choice", probe_choice),
    Probe("regex", "structured_outputs regex", probe_regex),
    Probe("logprobs", "logprobs with top_logprobs", probe_logprobs),
    Probe("logprobs_stream", "logprobs in stream chunks", probe_logprobs_streamed),
    Probe("n", "n=2: two choices", probe_n),
    Probe("n_stream", "n=2 streamed: both indexes", probe_n_streamed),
    Probe("tools_named", "tools, tool_choice naming a function", probe_tools_named),
    Probe("tools_required", "tools, tool_choice required", probe_tools_required),
    Probe(
        "tools_one_call",
        "tool_choice required with parallel_tool_calls false: one call",
        probe_tools_one_call,
    ),
    Probe("tools_stream", "tool call deltas in a stream", probe_tools_streamed),
    Probe("completions", "POST /v1/completions", probe_completions),
    Probe("completions_stream", "POST /v1/completions streamed", probe_completions_streamed),
    Probe("unknown_field", "an unknown field is a 400 naming it", probe_unknown_field),
    Probe(
        "unknown_model", "an unknown model is a 404 in OpenAI's error shape", probe_unknown_model
    ),
)

# A reply of the wrong shape can fail a check in any of these ways before a probe's own
# require() sees it (a missing key, a None where a dict was due).
_SHAPE_ERRORS = (KeyError, TypeError, ValueError, IndexError, AttributeError)


def run_probe(probe: Probe, api: Api) -> Json:
    """``{"passed": bool, "detail": str}``: why it failed, or "" when it passed."""
    try:
        probe.run(api)
    except ProbeFailed as exc:
        return {"passed": False, "detail": str(exc)[:300]}
    except _SHAPE_ERRORS as exc:
        return {"passed": False, "detail": f"{type(exc).__name__}: {exc}"[:300]}
    except httpx.HTTPError as exc:
        return {"passed": False, "detail": f"HTTP error: {exc}"[:300]}
    return {"passed": True, "detail": ""}
