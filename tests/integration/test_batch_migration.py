"""Migration 0008 (the Batch API's tables) up, down and up again on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect

import migrations
from tests.integration.test_migrations import empty_database

pytestmark = pytest.mark.integration
__all__ = ["empty_database"]

BATCH_TABLES = {"batch_files", "batch_file_lines", "batches", "batch_line_errors"}


def shape(url: str) -> tuple[set[str], set[str], set[str]]:
    engine = create_engine(url)
    found = inspect(engine)
    tables = set(found.get_table_names())
    columns = {column["name"] for column in found.get_columns("jobs")}
    indexes = {str(index["name"]) for index in found.get_indexes("jobs")}
    engine.dispose()
    return tables, columns, indexes


def test_batch_tables_come_and_go(empty_database: str) -> None:
    migrations.upgrade(empty_database)
    tables, columns, indexes = shape(empty_database)
    assert tables >= BATCH_TABLES
    assert {"batch_id", "custom_id"} <= columns and "ix_jobs_batch_id" in indexes
    migrations.downgrade(empty_database, "0007")
    tables, columns, _ = shape(empty_database)
    assert not tables & BATCH_TABLES and not {"batch_id", "custom_id"} & columns
    migrations.upgrade(empty_database)
    assert shape(empty_database)[0] >= BATCH_TABLES
