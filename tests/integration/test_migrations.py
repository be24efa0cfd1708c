"""Alembic migrations on both databases llmq supports: up, down and up again, with data."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from sqlalchemy import create_engine, inspect, text
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError

import migrations
from tests.conftest import POSTGRES_BASE, parallel_slot

pytestmark = pytest.mark.integration

INSERT = text(
    "INSERT INTO jobs (id, idempotency_key, tier, priority, routing, status, request,"
    " attempts, created_at, owner) VALUES (:id, :key, 'small', 'interactive', '{}', 'queued',"
    " '{}', 0, CURRENT_TIMESTAMP, :owner)"
)


@pytest.fixture(params=["sqlite", "postgresql"])
def empty_database(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[str]:
    """The URL of a database with no tables yet."""
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path / 'migrate.db'}"
        return
    name = f"llmq_migrations_{parallel_slot()}"
    admin = create_engine(make_url(POSTGRES_BASE), isolation_level="AUTOCOMMIT")
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}"'))
        conn.execute(text(f'CREATE DATABASE "{name}"'))
    yield make_url(POSTGRES_BASE).set(database=name).render_as_string(hide_password=False)
    with admin.connect() as conn:
        conn.execute(text(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)'))
    admin.dispose()


def insert(url: str, job_id: str, key: str | None, owner: str | None) -> None:
    engine = create_engine(url)
    try:
        with engine.begin() as conn:
            conn.execute(INSERT, {"id": job_id, "key": key, "owner": owner})
    finally:
        engine.dispose()


def test_idempotency_keys_become_per_owner_and_back(empty_database: str) -> None:
    url = empty_database
    migrations.upgrade(url, "0005")
    insert(url, "a1", "order-1", "owner-a")
    insert(url, "n1", "order-2", None)
    with pytest.raises(IntegrityError):  # before 0006 keys are global
        insert(url, "b1", "order-1", "owner-b")

    migrations.upgrade(url)
    engine = create_engine(url)
    with engine.connect() as conn:
        scopes = dict(conn.execute(text("SELECT id, idempotency_scope FROM jobs")).all())
    columns = {column["name"] for column in inspect(engine).get_columns("jobs")}
    engine.dispose()
    assert scopes == {"a1": "owner-a", "n1": ""}
    assert {"idempotency_scope", "request_hash"} <= columns
    insert(url, "b1", "order-1", "owner-b")  # another owner may use the same key
    with pytest.raises(IntegrityError):  # the same owner may not
        insert(url, "a2", "order-1", "owner-a")

    # Down again: the later job that shares a key keeps its row and loses the key.
    migrations.downgrade(url, "0005")
    engine = create_engine(url)
    with engine.connect() as conn:
        keys = dict(conn.execute(text("SELECT id, idempotency_key FROM jobs")).all())
    engine.dispose()
    assert keys == {"a1": "order-1", "n1": "order-2", "b1": None}
    with pytest.raises(IntegrityError):
        insert(url, "c1", "order-1", "owner-c")
    migrations.upgrade(url)
