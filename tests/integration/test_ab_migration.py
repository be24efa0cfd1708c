"""Migration 0009 (A/B runs and tier promotions) up, down and up on SQLite and PostgreSQL."""

from __future__ import annotations

import pytest
from sqlalchemy import create_engine, inspect

import migrations
from tests.integration.test_migrations import empty_database

pytestmark = pytest.mark.integration
__all__ = ["empty_database"]

AB_TABLES = {"ab_runs", "tier_promotions"}


def tables(url: str) -> set[str]:
    engine = create_engine(url)
    found = set(inspect(engine).get_table_names())
    engine.dispose()
    return found


def test_ab_tables_come_and_go(empty_database: str) -> None:
    migrations.upgrade(empty_database)
    assert tables(empty_database) >= AB_TABLES
    migrations.downgrade(empty_database, "0008")
    assert not tables(empty_database) & AB_TABLES
    migrations.upgrade(empty_database)
    assert tables(empty_database) >= AB_TABLES
