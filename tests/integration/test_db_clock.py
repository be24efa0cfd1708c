"""Job times come from the database's clock, whatever the producer's or worker's says."""

from __future__ import annotations

import time
from collections.abc import Iterator
from datetime import UTC, datetime, timedelta

import pytest
from sqlalchemy import create_engine, event, select
from sqlalchemy.orm import Session, sessionmaker

from producer.client import Client
from schemas.db_clock import db_now
from schemas.settings import Settings
from schemas.tables import as_utc
from tests.conftest import job_row
from workers.jobs import claim_job

pytestmark = pytest.mark.integration

REQUEST = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
SKEW = timedelta(hours=1)


@pytest.fixture
def skewed_hosts(monkeypatch: pytest.MonkeyPatch) -> None:
    """The producer's clock an hour fast, the worker's an hour slow."""
    fast = lambda: datetime.now(UTC) + SKEW  # noqa: E731
    slow = lambda: datetime.now(UTC) - SKEW  # noqa: E731
    monkeypatch.setattr("producer.jobs.utcnow", fast, raising=False)
    monkeypatch.setattr("schemas.tables.utcnow", fast)
    monkeypatch.setattr("workers.jobs.utcnow", slow, raising=False)


def database_now(db_settings: Settings) -> datetime:
    engine = create_engine(db_settings.database_url)
    with engine.connect() as conn:
        now = conn.scalar(select(db_now()))
    engine.dispose()
    assert now is not None
    return as_utc(now)


def sessions_for(db_settings: Settings) -> Iterator[sessionmaker[Session]]:
    engine = create_engine(db_settings.database_url)
    yield sessionmaker(engine)
    engine.dispose()


@pytest.mark.usefixtures("skewed_hosts")
def test_created_and_deadline_are_on_the_database_clock(db_settings: Settings) -> None:
    with Client(db_settings) as client:
        handle = client.submit(REQUEST, deadline_s=30)
    row = job_row(db_settings.database_url, handle.job_id)
    assert row.deadline_at is not None
    created, deadline = as_utc(row.created_at), as_utc(row.deadline_at)
    assert abs((database_now(db_settings) - created).total_seconds()) < 5
    assert (deadline - created).total_seconds() == pytest.approx(30, abs=0.05)


@pytest.mark.usefixtures("skewed_hosts")
def test_a_claim_reads_wait_and_time_left_off_the_database_clock(db_settings: Settings) -> None:
    with Client(db_settings) as client:
        handle = client.submit(REQUEST, deadline_s=30)
    for sessions in sessions_for(db_settings):
        claimed = claim_job(sessions, handle.job_id, "worker-1")
    assert claimed is not None and claimed.deadline_at is not None
    assert abs((database_now(db_settings) - claimed.started_at).total_seconds()) < 5
    assert 0 <= claimed.queue_wait_ms < 5000
    left_s = (claimed.deadline_at - claimed.started_at).total_seconds()
    assert 25 < left_s <= 30
    row = job_row(db_settings.database_url, handle.job_id)
    assert row.started_at is not None
    assert as_utc(row.started_at) == claimed.started_at


def test_a_claims_own_round_trip_counts_in_the_jobs_elapsed_time(db_settings: Settings) -> None:
    # The database stamps started_at as the claim runs; whatever the claim's answer
    # takes to come back (here 0.3 s) is the job's time too, read off this host's clock.
    with Client(db_settings) as client:
        handle = client.submit(REQUEST)
    engine = create_engine(db_settings.database_url)

    @event.listens_for(engine, "after_cursor_execute")
    def slow_answer(*args: object) -> None:
        if str(args[2]).lstrip().upper().startswith("UPDATE"):
            time.sleep(0.3)

    try:
        claimed = claim_job(sessionmaker(engine), handle.job_id, "worker-1")
    finally:
        engine.dispose()
    assert claimed is not None
    assert claimed.ms_since_created() >= 300
