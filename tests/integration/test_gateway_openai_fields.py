"""OpenAI's chat fields through the gateway, over real Redis and PostgreSQL: what llmq
does not serve is a 400 naming the field; what it serves reaches the worker's engine.

The real engine honouring them is tests/e2e/test_openai_fields.py.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import replace
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from producer.client import Client
from schemas.events import ErrorEvent, TokenLogprob, TopLogprob
from schemas.jobs import JobStatus
from schemas.sampling import Sampling, StructuredOutput
from schemas.settings import Settings
from schemas.tables import Job
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import CHAT, HELLO, assert_openai_error, auth, new_key
from tests.integration.test_recovery import REQUEST, SentJobs, die_mid_stream, reaper_for
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.engine.base import Delta
from workers.job_runner import run_job

pytestmark = pytest.mark.integration


@pytest.fixture
def gateway(integration_settings: Settings) -> Iterator[httpx.Client]:
    with running_gateway(integration_settings) as url, httpx.Client(base_url=url) as http:
        yield http


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"functions": [{"name": "lookup"}]}, "functions"),
        ({"tool_choice": "required"}, "tool_choice"),  # without tools
        ({"temprature": 0.2}, "temprature"),
        ({"messages": [{"role": "user", "content": "hi", "name": "ann"}]}, "messages[0].name"),
    ],
)
def test_a_field_llmq_does_not_serve_is_a_400_naming_it(
    gateway: httpx.Client, integration_settings: Settings, fields: dict[str, object], named: str
) -> None:
    response = gateway.post(
        CHAT, json={**HELLO, **fields}, headers=auth(new_key(integration_settings, "a"))
    )
    error = assert_openai_error(response, 400, "invalid_request")
    assert named in str(error["message"])


def test_served_fields_reach_the_engine_and_the_job_row(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    schema = {"type": "object", "properties": {"ok": {"type": "boolean"}}}
    body = {
        **HELLO,
        "stream": True,
        "priority": "batch",  # queued without a warm worker; run below
        "max_tokens": 16,
        "stop": "END",
        "seed": 5,
        "presence_penalty": 0.5,
        "frequency_penalty": 0.25,
        "user": "end-user-7",
        "response_format": {"type": "json_schema", "json_schema": {"name": "r", "schema": schema}},
        "top_k": 10,
        "min_p": 0.1,
        "repetition_penalty": 1.1,
        "min_tokens": 2,
        "tools": [],  # what some client libraries send by default: asks for nothing
    }
    engine = ScriptedEngine(['{"ok":', " true}"])
    headers = auth(new_key(integration_settings, "a"))
    with gateway.stream("POST", CHAT, json=body, headers=headers) as response:
        assert response.status_code == 200
        db = create_engine(integration_settings.database_url)
        with Session(db) as session:
            row = session.scalars(select(Job)).one()
        db.dispose()
        run_job(runtime_for(integration_settings, engine), row.id)
        data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    chunks = [json.loads(d) for d in data[:-1]]
    text = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks)
    assert json.loads(text) == {"ok": True}
    [options] = engine.seen
    assert options.stop == ("END",)
    assert options.seed == 5
    assert options.max_tokens == 16
    assert options.sampling == Sampling(
        presence_penalty=0.5,
        frequency_penalty=0.25,
        top_k=10,
        min_p=0.1,
        repetition_penalty=1.1,
        min_tokens=2,
        structured=StructuredOutput(kind="json_schema", json_schema=schema),
    )
    assert row.request["user"] == "end-user-7"
    assert row.request["sampling"]["structured"]["json_schema"] == schema


class LogprobEngine(ScriptedEngine):
    """Emits its chunks, each one token with a made-up log probability."""

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Delta]:
        for delta in super().stream(*args, **kwargs):
            value = -float(delta.completion_tokens)
            logprob = TokenLogprob(
                token=delta.text,
                logprob=value,
                top_logprobs=[TopLogprob(token=delta.text, logprob=value)],
            )
            yield replace(delta, logprobs=(logprob,))


def test_logprobs_stream_with_their_tokens_and_come_whole_with_the_result(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    body = {**HELLO, "stream": True, "priority": "batch", "logprobs": True, "top_logprobs": 1}
    engine = LogprobEngine(["Hel", "lo"])
    headers = auth(new_key(integration_settings, "a"))
    with gateway.stream("POST", CHAT, json=body, headers=headers) as response:
        assert response.status_code == 200
        db = create_engine(integration_settings.database_url)
        with Session(db) as session:
            job_id = session.scalars(select(Job.id)).one()
        db.dispose()
        run_job(runtime_for(integration_settings, engine), job_id)
        data = [line[6:] for line in response.iter_lines() if line.startswith("data: ")]
    assert engine.seen[0].sampling == Sampling(logprobs=1)
    choices = [json.loads(d)["choices"][0] for d in data[:-1]]
    streamed = [lp for c in choices if c["logprobs"] for lp in c["logprobs"]["content"]]
    assert [(lp["token"], lp["logprob"]) for lp in streamed] == [("Hel", -1.0), ("lo", -2.0)]
    assert streamed[0]["top_logprobs"] == [{"token": "Hel", "logprob": -1.0, "bytes": None}]
    assert choices[-1]["logprobs"] is None  # the finish chunk

    # The client's result gathers them all, as the gateway's non-streamed answer does.
    with Client(integration_settings) as client:
        result = client.handle(job_id).result(timeout=10)
    assert [lp.token for lp in result.logprobs or []] == ["Hel", "lo"]


def test_a_structured_answer_cut_by_a_lost_worker_fails_rather_than_resumes(
    integration_settings: Settings,
) -> None:
    request = {**REQUEST, "sampling": {"structured": {"kind": "json_object"}}}
    engine = ScriptedEngine(['"b": 2}'])
    reaper = reaper_for(integration_settings, SentJobs())
    reaper.run_once()
    with Client(integration_settings) as client:
        handle = client.submit(request)
        die_mid_stream(integration_settings, handle.job_id, ['{"a": 1, '], "small-1@gone")
        assert reaper.run_once() == 1
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        events = list(handle.events(timeout=10))
        assert client.status(handle.job_id) is JobStatus.FAILED
    assert engine.seen == []  # the engine never continued it
    end = events[-1]
    assert isinstance(end, ErrorEvent)
    assert "structured answer cannot go on" in end.message
