"""``POST /v1/completions`` through the gateway, over real Redis and PostgreSQL, with a
scripted engine: the job carries the raw prompt, the worker encodes it without the
chat template, answers stream and resume as chat's do, and keys, idempotency and
durability hold as for chat.

The real engine continuing a prompt is tests/e2e/test_completions.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, Sequence
from dataclasses import replace
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.exc import NoResultFound
from sqlalchemy.orm import Session

from producer.client import Client
from schemas.events import TokenEvent, TokenLogprob, TopLogprob
from schemas.jobs import JobStatus
from schemas.requests import GenerationRequest
from schemas.sampling import Sampling
from schemas.settings import Settings
from schemas.tables import Job
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import assert_openai_error, auth, new_key
from tests.integration.test_recovery import SentJobs, die_mid_stream, reaper_for
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.engine.base import Delta
from workers.job_runner import run_job

pytestmark = pytest.mark.integration

COMPLETIONS = "/v1/completions"
PROMPT = {"model": "small", "prompt": "The capital of France is"}


class PromptEngine(ScriptedEngine):
    """A scripted engine that records raw prompts apart from rendered chats."""

    def __init__(self, chunks: Sequence[str], **kwargs: Any) -> None:
        super().__init__(chunks, **kwargs)
        self.raw: list[str] = []

    def render_prompt(self, text: str) -> list[int]:
        self.raw.append(text)
        return [3] * len(text.split())


class LogprobEngine(PromptEngine):
    """Each chunk one token, with a made-up log probability and one alternative."""

    def stream(self, *args: Any, **kwargs: Any) -> Iterator[Delta]:
        for delta in super().stream(*args, **kwargs):
            value = -float(delta.completion_tokens)
            logprob = TokenLogprob(
                token=delta.text,
                logprob=value,
                top_logprobs=[TopLogprob(token="x", logprob=value - 1)],
            )
            yield replace(delta, logprobs=(logprob,))


@pytest.fixture
def gateway(integration_settings: Settings) -> Iterator[httpx.Client]:
    with running_gateway(integration_settings) as url, httpx.Client(base_url=url) as http:
        yield http


def only_job_id(settings: Settings) -> str:
    db = create_engine(settings.database_url)
    with Session(db) as session:
        job_id = session.scalars(select(Job.id)).one()
    db.dispose()
    return job_id


def sse_data(response: httpx.Response) -> list[tuple[str | None, str]]:
    events, event_id = [], None
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            events.append((event_id, line[6:]))
            event_id = None
    return events


def test_a_prompt_streams_as_text_completion_chunks_from_the_raw_prompt(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    body = {
        **PROMPT,
        "stream": True,
        "stream_options": {"include_usage": True},
        "priority": "batch",  # queued without a warm worker; run below
        "max_tokens": 8,
        "stop": ["\n"],
        "seed": 7,
        "presence_penalty": 0.5,
    }
    engine = PromptEngine([" Paris", "."])
    headers = auth(new_key(integration_settings, "a"))
    with gateway.stream("POST", COMPLETIONS, json=body, headers=headers) as response:
        assert response.status_code == 200
        assert response.headers["x-llmq-tier"] == "small"
        job_id = only_job_id(integration_settings)
        run_job(runtime_for(integration_settings, engine), job_id)
        data = sse_data(response)
    assert data[-1] == (None, "[DONE]")
    chunks = [json.loads(d) for _, d in data[:-1]]
    assert {c["object"] for c in chunks} == {"text_completion"}
    assert {c["id"] for c in chunks} == {f"cmpl-{job_id}"}
    assert "".join(c["choices"][0]["text"] for c in chunks if c["choices"]) == " Paris."
    assert chunks[-2]["choices"][0]["finish_reason"] == "length"
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == 2
    # The prompt as it is, never through the chat template.
    assert engine.raw == ["The capital of France is"]
    assert engine.rendered == []
    [options] = engine.seen
    assert (options.max_tokens, options.stop, options.seed) == (8, ("\n",), 7)
    assert options.sampling == Sampling(presence_penalty=0.5)


def test_a_prompt_answered_whole_with_legacy_logprobs(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    body = {**PROMPT, "priority": "batch", "logprobs": 1}
    engine = LogprobEngine([" Par", "is"])
    headers = auth(new_key(integration_settings, "a"))
    answer: dict[str, httpx.Response] = {}
    caller = threading.Thread(
        target=lambda: answer.update(
            response=gateway.post(COMPLETIONS, json=body, headers=headers, timeout=30)
        )
    )
    caller.start()
    try:
        job_id = None
        for _ in range(200):  # the row is written while the call waits for its answer
            try:
                job_id = only_job_id(integration_settings)
                break
            except NoResultFound:
                threading.Event().wait(0.05)
        assert job_id is not None
        run_job(runtime_for(integration_settings, engine), job_id)
    finally:
        caller.join(timeout=30)
    response = answer["response"]
    assert response.status_code == 200, response.text
    reply = response.json()
    assert reply["object"] == "text_completion"
    [choice] = reply["choices"]
    assert (choice["index"], choice["text"], choice["finish_reason"]) == (0, " Paris", "length")
    assert choice["logprobs"] == {
        "tokens": [" Par", "is"],
        "token_logprobs": [-1.0, -2.0],
        "top_logprobs": [{" Par": -1.0, "x": -2.0}, {"is": -2.0, "x": -3.0}],
        "text_offset": [0, 4],
    }
    assert reply["usage"]["completion_tokens"] == 2
    assert engine.seen[0].sampling == Sampling(logprobs=1)


@pytest.mark.parametrize(
    ("fields", "named"),
    [
        ({"echo": True}, "echo"),
        ({"suffix": " and so on"}, "suffix"),
        ({"prompt": ["one", "two"]}, "prompt"),
        ({"prompt": [101, 102]}, "prompt"),
        ({"n": 17}, "n"),
        ({"best_of": 3}, "best_of"),
        ({"temprature": 0.2}, "temprature"),
    ],
)
def test_what_completions_do_not_serve_is_a_400_naming_it(
    gateway: httpx.Client, integration_settings: Settings, fields: dict[str, Any], named: str
) -> None:
    response = gateway.post(
        COMPLETIONS, json={**PROMPT, **fields}, headers=auth(new_key(integration_settings, "a"))
    )
    error = assert_openai_error(response, 400, "invalid_request")
    assert named in str(error["message"])


def test_completions_need_a_key_and_a_model_llmq_serves(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    assert gateway.post(COMPLETIONS, json=PROMPT).status_code == 401
    headers = auth(new_key(integration_settings, "a"))
    response = gateway.post(COMPLETIONS, json={**PROMPT, "model": "gpt-x"}, headers=headers)
    assert_openai_error(response, 404, "model_not_found")


def test_idempotency_keys_hold_for_completions(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    headers = {**auth(new_key(integration_settings, "a")), "Idempotency-Key": "once"}
    body = {**PROMPT, "stream": True, "priority": "batch"}
    with gateway.stream("POST", COMPLETIONS, json=body, headers=headers) as first:
        assert first.status_code == 200
        job_id = only_job_id(integration_settings)
        with gateway.stream("POST", COMPLETIONS, json=body, headers=headers) as again:
            assert again.status_code == 200
            assert only_job_id(integration_settings) == job_id  # one job, not two
            run_job(runtime_for(integration_settings, PromptEngine(["!"])), job_id)
            assert json.loads(sse_data(again)[0][1])["id"] == f"cmpl-{job_id}"
        sse_data(first)
    # The same key with another prompt is a conflict, as for chat.
    other = gateway.post(COMPLETIONS, json={**body, "prompt": "Another prompt"}, headers=headers)
    assert_openai_error(other, 409, "idempotency_conflict")


def test_a_stream_resumes_from_last_event_id_with_its_offsets(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    headers = auth(new_key(integration_settings, "a"))
    body = {**PROMPT, "stream": True, "priority": "batch", "logprobs": 0}
    with gateway.stream("POST", COMPLETIONS, json=body, headers=headers) as response:
        job_id = only_job_id(integration_settings)
        run_job(runtime_for(integration_settings, LogprobEngine([" Par", "is", "."])), job_id)
        first = sse_data(response)
    resume = {**headers, "Last-Event-ID": f"{job_id}.0"}
    with gateway.stream("POST", COMPLETIONS, json=body, headers=resume) as response:
        rest = sse_data(response)
    assert [event_id for event_id, _ in rest] == [event_id for event_id, _ in first][1:]
    second = json.loads(rest[0][1])["choices"][0]
    assert second["text"] == "is"
    assert second["logprobs"]["text_offset"] == [4]
    assert second["logprobs"]["top_logprobs"] == [{"is": -2.0}]


def test_a_raw_prompt_resumes_after_a_lost_worker_without_the_chat_template(
    integration_settings: Settings,
) -> None:
    reaper = reaper_for(integration_settings, SentJobs())
    reaper.run_once()
    engine = PromptEngine([" four"])
    with Client(integration_settings) as client:
        handle = client.submit(GenerationRequest.from_prompt("one two", max_tokens=10))
        die_mid_stream(integration_settings, handle.job_id, [" three"], "small-1@gone")
        assert reaper.run_once() == 1
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        events = list(handle.events(timeout=10))
        assert client.status(handle.job_id) is JobStatus.DONE
        result = handle.result(timeout=10)
    assert [e.text for e in events if isinstance(e, TokenEvent)] == [" three", " four"]
    assert result.text == " three four"
    # The prompt's own tokens, then the streamed text's, to go on from.
    assert engine.raw == ["one two"] and engine.rendered == []
    assert engine.prompts == [[3, 3, 2]]
    assert engine.seen[0].max_tokens == 9


def test_an_old_chat_message_runs_through_the_chat_template_as_before(
    integration_settings: Settings,
) -> None:
    engine = PromptEngine(["hi"])
    with Client(integration_settings) as client:
        handle = client.submit({"messages": [{"role": "user", "content": "hello"}]})
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        assert handle.result(timeout=10).text == "hi"
    assert engine.raw == [] and engine.rendered == [[{"role": "user", "content": "hello"}]]
