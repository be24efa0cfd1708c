"""Conversations at the gateway: tagging a call, and summaries for their owner only."""

from __future__ import annotations

from collections.abc import Iterator
from datetime import UTC, date, datetime
from typing import Any

import httpx
import pytest
from sqlalchemy import create_engine, select
from sqlalchemy.orm import Session

from producer.conversations import load_turns
from schemas.db import make_engine, make_sessions
from schemas.settings import Settings
from schemas.tables import Job, Summary
from tests.gateway_server import running_gateway
from tests.integration.test_conversations import clear_conversations
from tests.integration.test_gateway import CHAT, HELLO, auth, new_key
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.job_runner import run_job

pytestmark = pytest.mark.integration


@pytest.fixture
def gateway(integration_settings: Settings) -> Iterator[httpx.Client]:
    clear_conversations(integration_settings.database_url)
    with running_gateway(integration_settings) as url, httpx.Client(base_url=url) as http:
        yield http


def run_one(
    http: httpx.Client, settings: Settings, secret: str, body: dict[str, Any], **headers: str
) -> Job:
    """Send a streamed batch call, run its job with a scripted engine, return its row."""
    body = {**HELLO, **body, "stream": True, "priority": "batch"}
    db = create_engine(settings.database_url)
    with http.stream("POST", CHAT, json=body, headers={**auth(secret), **headers}) as response:
        assert response.status_code == 200, response.read()
        with Session(db) as session:
            job = session.scalars(select(Job).order_by(Job.created_at.desc())).first()
        assert job is not None
        run_job(runtime_for(settings, ScriptedEngine(["hi"])), job.id)
        list(response.iter_lines())
    db.dispose()
    return job


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        ({}, {"X-Conversation-Id": "conv-1"}),
        ({"conversation_id": "conv-1"}, {}),
        ({"metadata": {"conversation_id": "conv-1"}}, {}),
    ],
)
def test_a_call_joins_its_key_s_conversation(
    gateway: httpx.Client,
    integration_settings: Settings,
    body: dict[str, Any],
    headers: dict[str, str],
) -> None:
    secret = new_key(integration_settings, "owner")
    job = run_one(gateway, integration_settings, secret, body, **headers)
    assert job.request["conversation_id"] == "conv-1"
    engine = make_engine(integration_settings.database_url)
    turns = load_turns(make_sessions(engine), "conv-1", owner=job.owner)
    engine.dispose()
    assert [(t.role, t.content) for t in turns] == [("user", "hello"), ("assistant", "hi")]


@pytest.mark.parametrize(
    ("body", "headers"),
    [
        ({}, {"X-Conversation-Id": "c" * 201}),
        ({"metadata": {"conversation_id": "c" * 201}}, {}),
    ],
)
def test_a_conversation_id_too_long_is_refused_and_nothing_is_queued(
    gateway: httpx.Client,
    integration_settings: Settings,
    body: dict[str, Any],
    headers: dict[str, str],
) -> None:
    secret = new_key(integration_settings, "owner")
    response = gateway.post(
        CHAT, json={**HELLO, **body, "priority": "batch"}, headers={**auth(secret), **headers}
    )
    assert response.status_code == 400, response.text
    message = response.json()["error"]["message"]
    assert "conversation id" in message and "at most 200 characters" in message
    assert "c" * 201 not in response.text
    db = create_engine(integration_settings.database_url)
    with Session(db) as session:
        assert session.scalars(select(Job)).first() is None
    db.dispose()


def test_summaries_are_served_to_their_owner_only(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    owner, stranger = new_key(integration_settings, "owner"), new_key(integration_settings, "x")
    job = run_one(gateway, integration_settings, owner, {"conversation_id": "conv-9"})
    db = create_engine(integration_settings.database_url)
    with Session(db) as session, session.begin():
        session.add(
            Summary(
                owner=job.owner,
                conversation_id="conv-9",
                day=date(2026, 3, 1),
                status="done",
                text="The customer said hello.",
                tier="small",
                model="bundled:smollm2-135m",
                prompt_tokens=120,
                output_tokens=6,
                attempts=0,
                step_jobs=[],
                created_at=datetime(2026, 3, 2, 2, tzinfo=UTC),
            )
        )
    db.dispose()
    path = "/v1/conversations/conv-9/summaries"
    mine = gateway.get(path, headers=auth(owner))
    assert mine.status_code == 200, mine.text
    (summary,) = mine.json()["data"]
    assert summary["day"] == "2026-03-01" and summary["text"] == "The customer said hello."
    assert summary["usage"] == {"prompt_tokens": 120, "output_tokens": 6}
    theirs = gateway.get(path, headers=auth(stranger))
    assert theirs.status_code == 404
    assert "conv-9" in theirs.json()["error"]["message"]
    assert "hello" not in theirs.text
    assert gateway.get(path).status_code == 401


def test_a_nul_in_a_conversation_id_is_a_404_not_a_503(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    answer = gateway.get(
        "/v1/conversations/a%00b/summaries", headers=auth(new_key(integration_settings, "k"))
    )
    assert answer.status_code == 404, answer.text
    assert "no conversation" in answer.json()["error"]["message"]
