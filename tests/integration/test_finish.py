"""A job's result is recorded exactly once, by the attempt that owns it (real PostgreSQL
and SQLite), and what follows the final event waits for nothing before it."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest
import redis
from sqlalchemy import event
from sqlalchemy.orm import Session, sessionmaker

from producer.client import Client
from schemas.db import make_engine, make_sessions
from schemas.events import JobOutcome, Timings, Usage
from schemas.jobs import JobStatus
from schemas.queues import SERVICE_MS_KEY, Tier
from schemas.settings import Settings
from tests.conftest import job_row
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.job_runner import record_service_ms, run_job
from workers.jobs import claim_job, finish_job
from workers.reaper import release_job, running_rows

pytestmark = pytest.mark.integration

REQUEST = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
USAGE = Usage(prompt_tokens=5, completion_tokens=2, cached_prompt_tokens=0)
TIMINGS = Timings(queue_wait_ms=1.5, ttft_ms=20.0, total_ms=40.0)


@pytest.fixture
def sessions(db_settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = make_engine(db_settings.database_url)
    yield make_sessions(engine)
    engine.dispose()


def running_job(db_settings: Settings, sessions: sessionmaker[Session]) -> tuple[str, int]:
    with Client(db_settings) as client:
        job_id = client.submit(REQUEST, priority="batch").job_id
    claimed = claim_job(sessions, job_id, "worker-1")
    assert claimed is not None
    return job_id, claimed.attempt


def finish(sessions: sessionmaker[Session], job_id: str, attempt: int, text: str) -> bool:
    return finish_job(
        sessions,
        job_id,
        JobOutcome(text, "stop", USAGE, TIMINGS),
        attempt=attempt,
        in_conversation=False,
    )


def test_the_owning_attempt_records_its_result_once(
    db_settings: Settings, sessions: sessionmaker[Session]
) -> None:
    job_id, attempt = running_job(db_settings, sessions)
    assert finish(sessions, job_id, attempt, "hello")
    assert not finish(sessions, job_id, attempt, "again")
    row = job_row(db_settings.database_url, job_id)
    assert row.status == JobStatus.DONE.value
    assert row.output_text == "hello"
    assert (row.finish_reason, row.completion_tokens, row.total_ms) == ("stop", 2, 40.0)
    assert row.finished_at is not None


def test_an_attempt_that_lost_its_job_records_nothing(
    db_settings: Settings, sessions: sessionmaker[Session]
) -> None:
    job_id, first = running_job(db_settings, sessions)
    # Taken for dead: the reaper releases it, and it is re-run as a second attempt.
    (row,) = [row for row in running_rows(sessions) if row.id == job_id]
    assert release_job(sessions, row, JobStatus.QUEUED)
    second = claim_job(sessions, job_id, "worker-2")
    assert second is not None and second.attempt == first + 1
    assert not finish(sessions, job_id, first, "stale")
    row = job_row(db_settings.database_url, job_id)
    assert (row.status, row.output_text) == (JobStatus.RUNNING.value, None)
    assert finish(sessions, job_id, second.attempt, "fresh")
    assert job_row(db_settings.database_url, job_id).output_text == "fresh"


def test_a_result_outside_a_conversation_is_one_statement(
    integration_settings: Settings,
) -> None:
    engine = make_engine(integration_settings.database_url)
    sessions = make_sessions(engine)
    job_id, attempt = running_job(integration_settings, sessions)
    statements: list[str] = []

    def record(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        statements.append(statement.split(maxsplit=1)[0].upper())

    event.listen(engine, "before_cursor_execute", record)
    try:
        assert finish(sessions, job_id, attempt, "hello")
    finally:
        event.remove(engine, "before_cursor_execute", record)
        engine.dispose()
    assert statements == ["UPDATE"]


def test_the_service_time_average_folds_each_job_in(integration_settings: Settings) -> None:
    runtime = runtime_for(integration_settings, ScriptedEngine(["x"]))
    record_service_ms(runtime, 100.0)
    record_service_ms(runtime, 200.0)
    client = redis.Redis.from_url(integration_settings.broker_url)
    average = client.hget(SERVICE_MS_KEY, Tier.SMALL.value)
    assert average is not None
    assert float(average) == pytest.approx(0.8 * 100.0 + 0.2 * 200.0)


def test_a_finished_job_records_its_service_time(integration_settings: Settings) -> None:
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        run_job(runtime_for(integration_settings, ScriptedEngine(["Hel", "lo"])), handle.job_id)
        assert handle.result(timeout=10).text == "Hello"
    client_redis = redis.Redis.from_url(integration_settings.broker_url)
    assert client_redis.hget(SERVICE_MS_KEY, Tier.SMALL.value) is not None
