"""Shared fixtures: real Redis and PostgreSQL, flushed per test; one real worker per session.

Each test tier uses its own Redis database and PostgreSQL database, so a worker
started for end-to-end tests never consumes what an integration test enqueued.
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis
from sqlalchemy import create_engine, text
from sqlalchemy.engine import make_url
from sqlalchemy.orm import Session

import migrations
from schemas.settings import Settings
from schemas.tables import Job

REDIS_BASE = os.environ.get("LLMQ_TEST_REDIS", "redis://127.0.0.1:6379")
POSTGRES_BASE = os.environ.get(
    "LLMQ_TEST_POSTGRES", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres"
)
E2E_REDIS_DB = 13
# One Redis database and one PostgreSQL database per parallel test process (pytest-xdist
# names them gw0, gw1, ...; LLMQ_TEST_SLOT picks one by hand), so processes never flush
# each other's data.
INTEGRATION_REDIS_DBS = (14, 12, 11, 10, 9, 8, 7, 6, 5, 4)


def parallel_slot() -> int:
    """Which parallel test process this is: 0 when tests run in one process."""
    explicit = os.environ.get("LLMQ_TEST_SLOT")
    if explicit:
        return int(explicit)
    return int(os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw") or 0)


INTEGRATION_REDIS_DB = INTEGRATION_REDIS_DBS[parallel_slot() % len(INTEGRATION_REDIS_DBS)]


def postgres_database(name: str) -> str:
    """URL of a fresh-enough database ``name``, created if missing and migrated."""
    admin_url = make_url(POSTGRES_BASE)
    admin = create_engine(admin_url, isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        exists = conn.scalar(text("SELECT 1 FROM pg_database WHERE datname = :n"), {"n": name})
        if not exists:
            conn.execute(text(f'CREATE DATABASE "{name}"'))
    admin.dispose()
    url = admin_url.set(database=name).render_as_string(hide_password=False)
    migrations.upgrade(url)
    return url


def job_row(database_url: str, job_id: str) -> Job:
    """A job row as the database holds it now."""
    engine = create_engine(database_url)
    with Session(engine) as session:
        job = session.get(Job, job_id)
    engine.dispose()
    assert job is not None, f"no row for job {job_id}"
    return job


def truncate_jobs(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(text("DELETE FROM jobs"))
    engine.dispose()


@pytest.fixture(scope="session")
def integration_db_url() -> str:
    slot = parallel_slot()
    return postgres_database("llmq_integration" + (f"_{slot}" if slot else ""))


@pytest.fixture
def integration_settings(integration_db_url: str, tmp_path: Path) -> Iterator[Settings]:
    """Settings on real services, with an empty jobs table and an empty Redis database."""
    redis_url = f"{REDIS_BASE}/{INTEGRATION_REDIS_DB}"
    client = redis.Redis.from_url(redis_url)
    client.flushdb()
    truncate_jobs(integration_db_url)
    yield Settings(
        broker_url=redis_url,
        database_url=integration_db_url,
        model_cache_dir=tmp_path / "cache",
    )
    client.flushdb()
    client.close()


@pytest.fixture(params=["postgresql", "sqlite"])
def db_settings(
    request: pytest.FixtureRequest, integration_settings: Settings, tmp_path: Path
) -> Settings:
    """``integration_settings``, once on PostgreSQL and once on a migrated SQLite file."""
    if request.param == "postgresql":
        return integration_settings
    url = f"sqlite:///{tmp_path / 'jobs.db'}"
    migrations.upgrade(url)
    return integration_settings.model_copy(update={"database_url": url})
