"""Tools through the gateway, over real Redis and PostgreSQL, with a scripted engine: the
job carries the tools, the engine gets the forced call's constraint and the tools'
instruction, and the answer comes back as ``tool_calls``, streamed and not.

The real engine is tests/e2e/test_openai_tools.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import replace
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from schemas.sampling import StructuredOutput
from schemas.settings import Settings
from schemas.tables import Job
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import CHAT, auth, new_key
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.engine.base import Delta
from workers.job_runner import run_job

pytestmark = pytest.mark.integration

WEATHER_ARGS = {
    "type": "object",
    "properties": {"city": {"type": "string"}},
    "required": ["city"],
}
TOOLS = [
    {"type": "function", "function": {"name": "get_weather", "parameters": WEATHER_ARGS}},
    {"type": "function", "function": {"name": "get_time", "description": "Time in a zone"}},
]
NAMED = {"type": "function", "function": {"name": "get_weather"}}
BODY: dict[str, Any] = {
    "model": "small",
    "messages": [{"role": "user", "content": "Weather in Paris?"}],
    "tools": TOOLS,
    "priority": "batch",  # queued without a warm worker; run by the test
}


class StoppingEngine(ScriptedEngine):
    """A scripted engine whose answer ends as a finished one does (``stop``)."""

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Delta]:
        for delta in super().stream(*args, **kwargs):
            yield replace(delta, finish_reason="stop") if delta.finished else delta


@pytest.fixture
def gateway(integration_settings: Settings) -> Iterator[httpx.Client]:
    with running_gateway(integration_settings) as url, httpx.Client(base_url=url) as http:
        yield http


def only_job(settings: Settings) -> Job:
    db = create_engine(settings.database_url)
    try:
        deadline = time.monotonic() + 10
        while True:
            with Session(db) as session:
                row = session.scalars(select(Job)).one_or_none()
            if row is not None or time.monotonic() > deadline:
                assert row is not None
                return row
            time.sleep(0.05)
    finally:
        db.dispose()


def streamed(
    gateway: httpx.Client, settings: Settings, engine: ScriptedEngine, body: dict[str, Any]
) -> tuple[list[dict[str, Any]], Job]:
    """The stream's chunks (without ``[DONE]``) and the job's row."""
    headers = auth(new_key(settings, "a"))
    with gateway.stream("POST", CHAT, json={**body, "stream": True}, headers=headers) as response:
        assert response.status_code == 200
        row = only_job(settings)
        run_job(runtime_for(settings, engine), row.id)
        data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert data[-1] == "[DONE]"
    return [json.loads(d) for d in data[:-1]], row


def answered(
    gateway: httpx.Client, settings: Settings, engine: ScriptedEngine, body: dict[str, Any]
) -> dict[str, Any]:
    """The non-streamed answer's body."""
    headers = auth(new_key(settings, "a"))
    with ThreadPoolExecutor(1) as pool:
        pending = pool.submit(gateway.post, CHAT, json=body, headers=headers, timeout=30)
        run_job(runtime_for(settings, engine), only_job(settings).id)
        response = pending.result()
    assert response.status_code == 200, response.text
    reply: dict[str, Any] = response.json()
    return reply


def test_a_named_call_streams_as_tool_call_deltas(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    engine = StoppingEngine(['{"city":', ' "Paris"}'])
    chunks, row = streamed(gateway, integration_settings, engine, {**BODY, "tool_choice": NAMED})
    deltas = [c["choices"][0]["delta"] for c in chunks]
    first = deltas[0]
    assert first["role"] == "assistant"
    assert first["content"] is None
    assert first["tool_calls"] == [
        {
            "index": 0,
            "id": f"call_{row.id}",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city":'},
        }
    ]
    assert deltas[1] == {"tool_calls": [{"index": 0, "function": {"arguments": ' "Paris"}'}}]}
    assert chunks[-1]["choices"][0]["finish_reason"] == "tool_calls"
    # The engine was given the constraint and told of the tools.
    [options] = engine.seen
    assert options.sampling is not None
    assert options.sampling.structured == StructuredOutput(
        kind="json_schema", json_schema=WEATHER_ARGS
    )
    [rendered] = engine.rendered
    assert rendered[0]["role"] == "system"
    assert "Call the tool get_weather" in rendered[0]["content"]
    assert row.request["tools"] == TOOLS
    assert row.request["tool_choice"] == NAMED


def test_required_answers_with_the_call_whole(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    engine = StoppingEngine(['[{"name": "get_time", ', '"parameters": {"zone": "UTC"}}]'])
    reply = answered(gateway, integration_settings, engine, {**BODY, "tool_choice": "required"})
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["content"] is None
    [call] = choice["message"]["tool_calls"]
    assert call["id"] == f"call_{reply['llmq']['job_id']}"
    assert call["function"] == {"name": "get_time", "arguments": '{"zone": "UTC"}'}
    [options] = engine.seen
    assert options.sampling is not None and options.sampling.structured is not None
    assert options.sampling.structured.json_schema is not None
    assert "maxItems" not in options.sampling.structured.json_schema  # parallel by default


TWO_CALLS = [
    '[{"name": "get_time", "parameters": {"zone": "UTC"}}, ',
    '{"name": "get_time", "parameters": {"zone": "CET"}}]',
]


def test_required_answers_with_several_calls(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    body = {**BODY, "tool_choice": "required"}
    reply = answered(gateway, integration_settings, StoppingEngine(TWO_CALLS), body)
    calls = reply["choices"][0]["message"]["tool_calls"]
    job_id = reply["llmq"]["job_id"]
    assert [call["id"] for call in calls] == [f"call_{job_id}", f"call_{job_id}_1"]
    arguments = [call["function"]["arguments"] for call in calls]
    assert arguments == ['{"zone": "UTC"}', '{"zone": "CET"}']


def test_without_parallel_calls_required_allows_one_call(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    engine = StoppingEngine(TWO_CALLS)  # a model that went past the bound anyway
    body = {**BODY, "tool_choice": "required", "parallel_tool_calls": False}
    reply = answered(gateway, integration_settings, engine, body)
    [call] = reply["choices"][0]["message"]["tool_calls"]
    assert call["function"]["arguments"] == '{"zone": "UTC"}'
    [options] = engine.seen
    assert options.sampling is not None and options.sampling.structured is not None
    assert options.sampling.structured.json_schema is not None
    assert options.sampling.structured.json_schema["maxItems"] == 1
    assert only_job(integration_settings).request["parallel_tool_calls"] is False


def test_required_streams_the_call_at_the_end(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    engine = StoppingEngine(['[{"name": "get_time", ', '"parameters": {}}]'])
    chunks, row = streamed(
        gateway, integration_settings, engine, {**BODY, "tool_choice": "required"}
    )
    [call_chunk, finish] = chunks
    assert call_chunk["choices"][0]["delta"]["tool_calls"] == [
        {
            "index": 0,
            "id": f"call_{row.id}",
            "type": "function",
            "function": {"name": "get_time", "arguments": "{}"},
        }
    ]
    assert finish["choices"][0]["finish_reason"] == "tool_calls"


def test_auto_answers_text_as_text_and_a_call_as_a_call(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    engine = StoppingEngine(["It is", " sunny."])
    chunks, _ = streamed(gateway, integration_settings, engine, BODY)
    text = "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks)
    assert text == "It is sunny."
    assert chunks[-1]["choices"][0]["finish_reason"] == "stop"
    [rendered] = engine.rendered
    assert "<tool_call>" in rendered[0]["content"]  # auto: told the form of a call
    assert "sampling" not in only_job(integration_settings).request


def test_auto_reads_a_hermes_call_out_of_the_answer(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    engine = StoppingEngine(
        ['<tool_call>\n{"name": "get_weather", ', '"arguments": {"city": "Oslo"}}']
    )
    reply = answered(gateway, integration_settings, engine, {**BODY, "tool_choice": "auto"})
    choice = reply["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    [call] = choice["message"]["tool_calls"]
    assert call["function"] == {"name": "get_weather", "arguments": '{"city": "Oslo"}'}


def test_a_history_with_a_call_and_its_result_reaches_the_model_as_text(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    messages = [
        *BODY["messages"],
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "content": "18 C and sunny"},
    ]
    engine = StoppingEngine(["It is 18 C."])
    body = {**BODY, "messages": messages, "tool_choice": "none"}
    reply = answered(gateway, integration_settings, engine, body)
    assert reply["choices"][0]["message"] == {"role": "assistant", "content": "It is 18 C."}
    [rendered] = engine.rendered
    assert [m["role"] for m in rendered] == ["user", "assistant", "user"]
    assert '"arguments": {"city": "Paris"}' in rendered[1]["content"]
    assert rendered[2]["content"] == "<tool_response>\n18 C and sunny\n</tool_response>"


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"tool_choice": {"type": "function", "function": {"name": "nope"}}}, "nope"),
        ({"tool_choice": "required", "response_format": {"type": "json_object"}}, "tool_choice"),
        ({"tools": [], "tool_choice": "required"}, "tool_choice"),
    ],
)
def test_tools_that_cannot_be_served_are_a_400_saying_why(
    gateway: httpx.Client, integration_settings: Settings, fields: dict[str, Any], named: str
) -> None:
    headers = auth(new_key(integration_settings, "a"))
    response = gateway.post(CHAT, json={**BODY, **fields}, headers=headers)
    assert response.status_code == 400
    assert named in response.json()["error"]["message"]
