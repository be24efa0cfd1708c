"""Submitting against real Redis and PostgreSQL, no worker running."""

from __future__ import annotations

import base64
import json
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from producer.client import Client
from schemas.errors import (
    BrokerUnavailable,
    IdempotencyConflict,
    InvalidRequest,
    PromptTooLong,
    QueueFull,
)
from schemas.jobs import JobStatus
from schemas.queues import GENERATE_TASK, Priority, Tier, all_queues, queue_name
from schemas.settings import Settings, TierConfig
from schemas.tables import Job

pytestmark = pytest.mark.integration


def queued_messages(settings: Settings) -> dict[str, list[dict[str, object]]]:
    client = redis.Redis.from_url(settings.broker_url)
    found = {name: [json.loads(m) for m in client.lrange(name, 0, -1)] for name in all_queues()}
    return {name: messages for name, messages in found.items() if messages}


def job_rows(settings: Settings) -> list[Job]:
    engine = create_engine(settings.database_url)
    with Session(engine) as session:
        rows = list(session.scalars(select(Job)))
    engine.dispose()
    return rows


def test_submit_records_a_queued_row_and_a_message_on_the_tier_queue(
    integration_settings: Settings,
) -> None:
    with Client(integration_settings) as client:
        handle = client.submit("Compare your two plans", tier="medium", priority="batch")
    (row,) = job_rows(integration_settings)
    assert row.id == handle.job_id
    assert row.status == JobStatus.QUEUED
    assert (row.tier, row.priority) == ("medium", "batch")
    assert row.routing["reason"] == "explicit tier"
    assert row.request["messages"][0]["content"] == "Compare your two plans"
    messages = queued_messages(integration_settings)
    assert list(messages) == ["llm.medium.batch"]
    (message,) = messages["llm.medium.batch"]
    assert message["content-type"] == "application/json"
    assert message["headers"]["task"] == GENERATE_TASK  # type: ignore[index]
    args, _kwargs, _embed = json.loads(base64.b64decode(message["body"]))  # type: ignore[arg-type]
    assert args == [handle.job_id]


def test_auto_tier_goes_to_the_default_tier_interactive_queue(
    integration_settings: Settings,
) -> None:
    with Client(integration_settings) as client:
        client.submit("hi")
    assert list(queued_messages(integration_settings)) == ["llm.small.interactive"]
    (row,) = job_rows(integration_settings)
    assert row.routing["requested"] == "auto"


def test_same_idempotency_key_returns_the_same_job_once(integration_settings: Settings) -> None:
    with Client(integration_settings) as client:
        first = client.submit("hi", idempotency_key="order-42")
        second = client.submit("hi", idempotency_key="order-42")
    assert first.job_id == second.job_id
    assert len(job_rows(integration_settings)) == 1
    assert sum(len(m) for m in queued_messages(integration_settings).values()) == 1


def test_idempotency_keys_are_scoped_to_their_owner(integration_settings: Settings) -> None:
    with Client(integration_settings) as client:
        mine = client.submit("hi", idempotency_key="order-42", owner="tenant-a")
        again = client.submit("hi", idempotency_key="order-42", owner="tenant-a")
        theirs = client.submit("hi", idempotency_key="order-42", owner="tenant-b")
        anonymous = client.submit("hi", idempotency_key="order-42")
        anonymous_again = client.submit("hi", idempotency_key="order-42")
    assert mine.job_id == again.job_id
    assert anonymous.job_id == anonymous_again.job_id
    assert len({mine.job_id, theirs.job_id, anonymous.job_id}) == 3
    rows = {row.id: row for row in job_rows(integration_settings)}
    assert len(rows) == 3
    assert rows[theirs.job_id].owner == "tenant-b"
    assert rows[anonymous.job_id].owner is None
    assert sum(len(m) for m in queued_messages(integration_settings).values()) == 3


@pytest.mark.parametrize(
    "change",
    [{"request": "something else"}, {"tier": "large"}, {"priority": "batch"}],
)
def test_reusing_a_key_for_a_different_request_is_a_conflict(
    integration_settings: Settings, change: dict[str, str]
) -> None:
    original: dict[str, str] = {"request": "hi", "tier": "small", "priority": "interactive"}
    replay = {**original, **change}
    with Client(integration_settings) as client:
        first = client.submit(
            original["request"],
            tier=original["tier"],
            priority=original["priority"],
            idempotency_key="order-42",
            owner="tenant-a",
        )
        with pytest.raises(IdempotencyConflict, match="different request"):
            client.submit(
                replay["request"],
                tier=replay["tier"],
                priority=replay["priority"],
                idempotency_key="order-42",
                owner="tenant-a",
            )
    assert [row.id for row in job_rows(integration_settings)] == [first.job_id]
    assert sum(len(m) for m in queued_messages(integration_settings).values()) == 1


def test_an_owner_longer_than_the_column_is_refused(integration_settings: Settings) -> None:
    with Client(integration_settings) as client, pytest.raises(InvalidRequest, match="owner"):
        client.submit("hi", owner="x" * 33)
    assert job_rows(integration_settings) == []


@pytest.mark.parametrize(
    ("request_", "options", "error", "problem"),
    [
        ({"messages": []}, {}, InvalidRequest, "messages"),
        ("   ", {}, InvalidRequest, "must not be empty"),
        ("hi", {"tier": "huge"}, InvalidRequest, "tier"),
        ("hi", {"priority": "urgent"}, InvalidRequest, "priority"),
        (
            {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 5000},
            {},
            PromptTooLong,
            "max_tokens",
        ),
        (
            {"messages": [{"role": "user", "content": "hi"}], "system_prompt": "nope"},
            {},
            InvalidRequest,
            "unknown system prompt",
        ),
    ],
)
def test_bad_requests_are_rejected_before_anything_is_written(
    integration_settings: Settings,
    request_: object,
    options: dict[str, str],
    error: type[Exception],
    problem: str,
) -> None:
    with Client(integration_settings) as client, pytest.raises(error, match=problem):
        client.submit(request_, **options)  # type: ignore[arg-type]
    assert job_rows(integration_settings) == []
    assert queued_messages(integration_settings) == {}


def test_redis_unreachable_fails_fast_and_leaves_no_row(integration_settings: Settings) -> None:
    unreachable = integration_settings.model_copy(update={"broker_url": "redis://127.0.0.1:1/0"})
    with pytest.raises(BrokerUnavailable, match="Redis is unreachable"):
        Client(unreachable)
    with (
        Client(unreachable, warm=False) as client,
        pytest.raises(BrokerUnavailable, match="nothing was enqueued"),
    ):
        client.submit("hi")
    engine = create_engine(integration_settings.database_url)
    with Session(engine) as session:
        assert session.scalar(select(func.count()).select_from(Job)) == 0
    engine.dispose()


def test_a_named_system_prompt_is_pinned_to_its_version(integration_settings: Settings) -> None:
    with Client(integration_settings) as client:
        client.submit({"messages": [{"role": "user", "content": "hi"}], "system_prompt": "support"})
    (row,) = job_rows(integration_settings)
    assert row.request["system_prompt"] == "support@1"


def test_a_system_prompt_too_long_for_the_tier_is_refused_at_submit(
    integration_settings: Settings, tmp_path: Path
) -> None:
    from tests.unit.test_submission import word_tokenizer_dir

    tier = TierConfig(model=str(word_tokenizer_dir(tmp_path)), max_model_len=1024)
    tiers = {**integration_settings.tiers, Tier.SMALL: tier}
    settings = integration_settings.model_copy(update={"tiers": tiers})
    request = {"messages": [{"role": "user", "content": "hi"}], "system_prompt": "support"}
    with Client(settings) as client, pytest.raises(PromptTooLong, match="context window of 1024"):
        client.submit(request, tier="small")
    assert job_rows(integration_settings) == []
    assert queued_messages(integration_settings) == {}


def test_a_full_queue_refuses_the_submit_and_leaves_no_row(integration_settings: Settings) -> None:
    tiers = {
        tier: TierConfig(max_queue_depth={Priority.INTERACTIVE: 2, Priority.BATCH: 0})
        for tier in Tier
    }
    settings = integration_settings.model_copy(update={"tiers": tiers})
    with Client(settings) as client:
        kept = [client.submit("hi", tier="small").job_id for _ in range(2)]
        with pytest.raises(QueueFull, match="is full \\(2 waiting, limit 2\\)") as refused:
            client.submit("hi", tier="small")
        assert refused.value.depth == 2
        with pytest.raises(QueueFull, match="limit 0"):
            client.submit("hi", tier="small", priority="batch")
    assert sorted(row.id for row in job_rows(settings)) == sorted(kept)
    assert len(queued_messages(settings)[queue_name(Tier.SMALL, Priority.INTERACTIVE)]) == 2
