"""Tools through the gateway with the official SDK on the real engine: a named
tool_choice and "required" get a tool call whose arguments parse as JSON and match the
function's schema, streamed and not; a conversation holding a call and its result is
served; "auto" answers either a call or text, well formed."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import jsonschema
import openai
import pytest

from schemas.settings import Settings
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import new_key

pytestmark = pytest.mark.e2e

WEATHER_ARGS = {
    "type": "object",
    "properties": {
        "city": {"type": "string", "maxLength": 40},
        "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]},
    },
    "required": ["city", "unit"],
    "additionalProperties": False,
}
TOOLS: list[Any] = [
    {
        "type": "function",
        "function": {
            "name": "get_weather",
            "description": "Current weather in a city",
            "parameters": WEATHER_ARGS,
        },
    },
    {
        "type": "function",
        "function": {
            "name": "get_time",
            "description": "Current time in a time zone",
            "parameters": {
                "type": "object",
                "properties": {"zone": {"type": "string", "maxLength": 40}},
                "required": ["zone"],
                "additionalProperties": False,
            },
        },
    },
]
ASK = [{"role": "user", "content": "What is the weather in Paris right now?"}]
NAMED: Any = {"type": "function", "function": {"name": "get_weather"}}
SCHEMAS = {tool["function"]["name"]: tool["function"]["parameters"] for tool in TOOLS}


@pytest.fixture(scope="module")
def sdk(e2e_settings: Settings, worker: str) -> Iterator[openai.OpenAI]:
    with running_gateway(e2e_settings) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key=new_key(e2e_settings, "tools"))


def create(sdk: openai.OpenAI, **fields: Any) -> Any:
    fields = {"messages": ASK, "tools": TOOLS, "max_tokens": 96, "temperature": 0, **fields}
    return sdk.chat.completions.create(model="small", **fields)


def check_call(call: Any, name: str | None = None) -> dict[str, Any]:
    """The call's arguments, checked: an id, a known function, JSON matching its schema."""
    assert call.id.startswith("call_")
    assert call.type == "function"
    assert name is None or call.function.name == name
    arguments = json.loads(call.function.arguments)
    jsonschema.validate(arguments, SCHEMAS[call.function.name])
    return dict(arguments)


def streamed_calls(sdk: openai.OpenAI, **fields: Any) -> tuple[dict[int, dict[str, str]], str]:
    """The calls a stream makes, assembled from their deltas as a client does, and the
    finish reason."""
    calls: dict[int, dict[str, str]] = {}
    finish = None
    for chunk in create(sdk, stream=True, **fields):
        for choice in chunk.choices:
            assert not choice.delta.content
            for delta in choice.delta.tool_calls or []:
                call = calls.setdefault(delta.index, {"id": "", "name": "", "arguments": ""})
                call["id"] += delta.id or ""
                call["name"] += (delta.function and delta.function.name) or ""
                call["arguments"] += (delta.function and delta.function.arguments) or ""
            finish = choice.finish_reason or finish
    assert finish is not None
    return calls, finish


@pytest.mark.parametrize("choice", [NAMED, "required"], ids=["named", "required"])
def test_a_forced_call_comes_back_as_a_tool_call_matching_the_schema(
    sdk: openai.OpenAI, choice: Any
) -> None:
    reply = create(sdk, tool_choice=choice, parallel_tool_calls=False)
    message = reply.choices[0].message
    assert reply.choices[0].finish_reason == "tool_calls"
    assert message.content is None
    [call] = message.tool_calls
    check_call(call, "get_weather" if choice == NAMED else None)


def test_required_with_parallel_calls_answers_calls_that_each_match_their_schema(
    sdk: openai.OpenAI,
) -> None:
    reply = create(sdk, tool_choice="required")  # parallel_tool_calls defaults to true
    calls = reply.choices[0].message.tool_calls
    assert reply.choices[0].finish_reason == "tool_calls"
    assert calls
    for call in calls:
        check_call(call, None)
    assert len({call.id for call in calls}) == len(calls)


@pytest.mark.parametrize("choice", [NAMED, "required"], ids=["named", "required"])
def test_a_forced_call_streams_as_tool_call_deltas(sdk: openai.OpenAI, choice: Any) -> None:
    calls, finish = streamed_calls(sdk, tool_choice=choice, parallel_tool_calls=False)
    assert finish == "tool_calls"
    assert list(calls) == [0]
    call = calls[0]
    assert call["id"].startswith("call_")
    assert call["name"] in SCHEMAS
    jsonschema.validate(json.loads(call["arguments"]), SCHEMAS[call["name"]])
    # The same job answered whole gives the same call (greedy decoding).
    whole = create(sdk, tool_choice=choice).choices[0].message.tool_calls[0]
    assert (whole.function.name, json.loads(whole.function.arguments)) == (
        call["name"],
        json.loads(call["arguments"]),
    )


def test_a_conversation_with_a_call_and_its_result_is_answered(sdk: openai.OpenAI) -> None:
    first = create(sdk, tool_choice=NAMED).choices[0].message
    [call] = first.tool_calls
    history = [
        *ASK,
        first.model_dump(exclude_none=True),
        {"role": "tool", "tool_call_id": call.id, "content": '{"temperature": 18}'},
    ]
    reply = create(sdk, messages=history, tool_choice="none", max_tokens=32)
    assert reply.choices[0].message.content
    assert not reply.choices[0].message.tool_calls


@pytest.mark.parametrize(
    "question",
    [
        "What is the weather in Paris right now?",
        "What time is it in Tokyo?",
        "Write one sentence about the sea.",
    ],
)
def test_auto_answers_a_well_formed_call_or_text(sdk: openai.OpenAI, question: str) -> None:
    reply = create(sdk, messages=[{"role": "user", "content": question}])
    choice = reply.choices[0]
    if choice.message.tool_calls:
        assert choice.finish_reason == "tool_calls"
        check_call(choice.message.tool_calls[0])
    else:
        assert choice.message.content
        assert choice.finish_reason in ("stop", "length")
