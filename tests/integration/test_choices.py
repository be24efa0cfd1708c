"""Several choices (``n``) in one job, over real Redis and PostgreSQL, with a scripted
engine: one engine request per choice, each streamed under its index, kept apart in
the final event, the row and the gateway's answers, and resumed after a lost worker
from what each had streamed.

The real engine answering several choices is tests/e2e/test_choices.py.
"""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, inspect, select
from sqlalchemy.exc import NoResultFound
from sqlalchemy.orm import Session

import migrations
from producer.client import Client
from schemas.events import ChoiceOutput, ErrorEvent, FinalEvent, TokenEvent
from schemas.jobs import JobStatus
from schemas.requests import GenerationRequest
from schemas.settings import Settings
from schemas.tables import Job
from tests.gateway_server import running_gateway
from tests.integration.test_completions import PromptEngine, only_job_id, sse_data
from tests.integration.test_gateway import CHAT, HELLO, auth, new_key
from tests.integration.test_migrations import empty_database
from tests.integration.test_recovery import SentJobs, reaper_for
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.job_runner import run_job
from workers.jobs import claim_job
from workers.publisher import StreamPublisher

pytestmark = pytest.mark.integration
__all__ = ["empty_database"]


@pytest.fixture
def gateway(integration_settings: Settings) -> Iterator[httpx.Client]:
    with running_gateway(integration_settings) as url, httpx.Client(base_url=url) as http:
        yield http


def row(settings: Settings, job_id: str) -> Job:
    db = create_engine(settings.database_url)
    with Session(db) as session:
        job = session.get(Job, job_id)
        assert job is not None
        session.expunge(job)
    db.dispose()
    return job


def test_each_choice_is_its_own_engine_request_and_stays_apart(
    integration_settings: Settings,
) -> None:
    engine = ScriptedEngine(["one", " two"])
    request = GenerationRequest.from_text("count", n=3, seed=7, max_tokens=5)
    with Client(integration_settings) as client:
        handle = client.submit(request)
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        events = list(handle.events(timeout=10))
        result = handle.result(timeout=10)
    assert sorted(options.seed for options in engine.seen) == [7, 8, 9]
    assert len(engine.prompts) == 3
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    for index in range(3):
        mine = [e for e in tokens if e.index == index]
        assert [e.text for e in mine] == ["one", " two"]
        assert [e.finish_reason for e in mine] == [None, "length"]
    final = events[-1]
    assert isinstance(final, FinalEvent)
    expected = [ChoiceOutput(index=i, text="one two", finish_reason="length") for i in range(3)]
    assert final.choices == expected
    assert final.usage.completion_tokens == 6
    assert result.choices == expected and result.text == "one two"
    stored = row(integration_settings, handle.job_id)
    assert stored.status == JobStatus.DONE and stored.output_text == "one two"
    assert stored.output_choices == [c.model_dump(mode="json") for c in expected]


def test_each_choice_resumes_from_what_it_streamed_after_a_lost_worker(
    integration_settings: Settings,
) -> None:
    reaper = reaper_for(integration_settings, SentJobs())
    reaper.run_once()
    engine = PromptEngine([" more"])
    with Client(integration_settings) as client:
        handle = client.submit(GenerationRequest.from_prompt("go", n=3, max_tokens=10))
        # A worker that streamed choice 0 whole, choice 1 in part, choice 2 not at all.
        runtime = runtime_for(integration_settings, ScriptedEngine([]))
        assert claim_job(runtime.sessions, handle.job_id, "small-1@gone") is not None
        publisher = StreamPublisher(runtime.redis, handle.job_id, ttl_s=60)
        publisher.token("done", index=0, finish_reason="stop")
        publisher.token("half way", index=1)
        assert reaper.run_once() == 1
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        result = handle.result(timeout=10)
    assert result.choices is not None
    assert [(c.text, c.finish_reason) for c in result.choices] == [
        ("done", "stop"),
        ("half way more", "length"),
        (" more", "length"),
    ]
    # Choice 0 never ran again; choice 1 went on after its own text, choice 2 afresh.
    assert sorted(engine.prompts) == [[3], [3, 2, 2]]
    assert sorted(options.max_tokens for options in engine.seen) == [8, 10]
    assert result.usage.completion_tokens == 1 + 3 + 1


def test_a_chat_stream_of_two_choices_and_a_whole_answer(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    headers = auth(new_key(integration_settings, "a"))
    body = {**HELLO, "n": 2, "stream": True, "priority": "batch"}
    with gateway.stream("POST", CHAT, json=body, headers=headers) as response:
        assert response.status_code == 200
        job_id = only_job_id(integration_settings)
        run_job(runtime_for(integration_settings, ScriptedEngine(["Hel", "lo"])), job_id)
        data = sse_data(response)
    chunks = [json.loads(d)["choices"] for _, d in data[:-1]]
    texts: dict[int, str] = {}
    finish: dict[int, str] = {}
    for [choice] in chunks:
        texts[choice["index"]] = texts.get(choice["index"], "") + (
            choice["delta"].get("content") or ""
        )
        if choice["finish_reason"]:
            finish[choice["index"]] = choice["finish_reason"]
    assert texts == {0: "Hello", 1: "Hello"} and finish == {0: "length", 1: "length"}

    answer: dict[str, httpx.Response] = {}
    whole = {**HELLO, "n": 2, "priority": "batch"}
    caller = threading.Thread(
        target=lambda: answer.update(r=gateway.post(CHAT, json=whole, headers=headers, timeout=30))
    )
    caller.start()
    try:
        new_id = None
        for _ in range(200):
            db = create_engine(integration_settings.database_url)
            with Session(db) as session:
                try:
                    new_id = session.scalars(select(Job.id).where(Job.id != job_id)).one()
                except NoResultFound:
                    new_id = None
            db.dispose()
            if new_id is not None:
                break
            threading.Event().wait(0.05)
        assert new_id is not None
        run_job(runtime_for(integration_settings, ScriptedEngine(["Hi"])), new_id)
    finally:
        caller.join(timeout=30)
    reply: dict[str, Any] = answer["r"].json()
    assert [(c["index"], c["message"]["content"]) for c in reply["choices"]] == [
        (0, "Hi"),
        (1, "Hi"),
    ]


def job_columns(url: str) -> set[str]:
    engine = create_engine(url)
    found = {column["name"] for column in inspect(engine).get_columns("jobs")}
    engine.dispose()
    return found


def test_the_choices_column_comes_and_goes(empty_database: str) -> None:
    migrations.upgrade(empty_database)
    assert "output_choices" in job_columns(empty_database)
    migrations.downgrade(empty_database, "0009")
    assert "output_choices" not in job_columns(empty_database)
    assert "output_text" in job_columns(empty_database)
    migrations.upgrade(empty_database)
    assert "output_choices" in job_columns(empty_database)


def test_a_cancel_stops_every_choice_in_the_engine(integration_settings: Settings) -> None:
    engine = ScriptedEngine([f"w{i} " for i in range(50)], delay_s=0.05)
    runtime = runtime_for(integration_settings, engine)
    with Client(integration_settings) as client:
        handle = client.submit(GenerationRequest.from_text("count", n=2, max_tokens=50))
        worker = threading.Thread(target=run_job, args=(runtime, handle.job_id))
        worker.start()
        events = handle.events(timeout=20)
        assert isinstance(next(events), TokenEvent)
        assert runtime.running.cancel(handle.job_id)  # what the cancel listener does
        rest = list(events)
        worker.join(timeout=10)
        assert not worker.is_alive()
        assert client.status(handle.job_id) is JobStatus.CANCELLED
    assert isinstance(rest[-1], ErrorEvent) and rest[-1].status == "cancelled"
    assert len(rest) < 40  # both aborted long before their 50 chunks each
