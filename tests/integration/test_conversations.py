"""Conversations: a finished job's turns are recorded, scoped by the owner that sent them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from sqlalchemy import create_engine, text

from producer.client import Client
from producer.conversations import ConversationNotFound, load_turns
from schemas.errors import InvalidRequest
from schemas.settings import Settings
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.job_runner import run_job

pytestmark = pytest.mark.integration


def clear_conversations(database_url: str) -> None:
    engine = create_engine(database_url)
    with engine.begin() as conn:
        for table in ("summaries", "turns", "conversations"):
            conn.execute(text(f"DELETE FROM {table}"))
    engine.dispose()


@pytest.fixture
def settings(integration_settings: Settings) -> Iterator[Settings]:
    clear_conversations(integration_settings.database_url)
    yield integration_settings


def test_a_finished_job_adds_its_new_turns(settings: Settings) -> None:
    runtime = runtime_for(settings, ScriptedEngine(["Your order ", "ships today."]))
    with Client(settings) as client:
        first = client.submit("Where is order 8812?", owner="key-a", conversation_id="c-1")
        run_job(runtime, first.job_id)
        history = {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": "Where is order 8812?"},
                {"role": "assistant", "content": "Your order ships today."},
                {"role": "user", "content": "And 8813?"},
            ]
        }
        second = client.submit(history, owner="key-a", conversation_id="c-1")
        run_job(runtime, second.job_id)
        turns = load_turns(client.sessions, "c-1", owner="key-a")
    assert [(t.seq, t.role, t.content) for t in turns] == [
        (1, "user", "Where is order 8812?"),
        (2, "assistant", "Your order ships today."),
        (3, "user", "And 8813?"),
        (4, "assistant", "Your order ships today."),
    ]
    assert [t.job_id for t in turns] == [first.job_id] * 2 + [second.job_id] * 2
    assert turns[1].tokens == 2 and turns[0].tokens is None


def test_a_job_without_a_conversation_or_that_failed_records_no_turn(settings: Settings) -> None:
    with Client(settings) as client:
        plain = client.submit("hello", owner="key-a")
        run_job(runtime_for(settings, ScriptedEngine(["hi"])), plain.job_id)
        failing = client.submit("hello", owner="key-a", conversation_id="c-2")
        run_job(runtime_for(settings, ScriptedEngine(["a", "b"], fail=True)), failing.job_id)
        with pytest.raises(ConversationNotFound):
            load_turns(client.sessions, "c-2", owner="key-a")


def test_another_owner_never_sees_or_extends_a_conversation(settings: Settings) -> None:
    runtime = runtime_for(settings, ScriptedEngine(["ok"]))
    with Client(settings) as client:
        mine = client.submit("secret plan", owner="key-a", conversation_id="shared-id")
        theirs = client.submit("other text", owner="key-b", conversation_id="shared-id")
        anonymous = client.submit("no key", conversation_id="shared-id")
        for handle in (mine, theirs, anonymous):
            run_job(runtime, handle.job_id)
        a = load_turns(client.sessions, "shared-id", owner="key-a")
        b = load_turns(client.sessions, "shared-id", owner="key-b")
        nobody = load_turns(client.sessions, "shared-id", owner=None)
        with pytest.raises(ConversationNotFound):
            load_turns(client.sessions, "shared-id", owner="key-c")
    assert [t.content for t in a] == ["secret plan", "ok"]
    assert [t.content for t in b] == ["other text", "ok"]
    assert [t.content for t in nobody] == ["no key", "ok"]


def test_a_request_naming_another_conversation_is_refused(settings: Settings) -> None:
    with Client(settings) as client, pytest.raises(InvalidRequest, match="give one"):
        client.submit(
            {"messages": [{"role": "user", "content": "x"}], "conversation_id": "a"},
            conversation_id="b",
        )
