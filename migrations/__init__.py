"""Alembic migrations for the job database, runnable from code and from ``llmq db``."""

from __future__ import annotations

from pathlib import Path

from alembic import command
from alembic.config import Config

from schemas.boundary import database_boundary

MIGRATIONS_DIR = Path(__file__).resolve().parent


def alembic_config(database_url: str) -> Config:
    """Alembic configuration for this folder, pointed at ``database_url``."""
    config = Config()
    config.set_main_option("script_location", str(MIGRATIONS_DIR))
    config.set_main_option("sqlalchemy.url", database_url.replace("%", "%%"))
    return config


def upgrade(database_url: str, revision: str = "head") -> None:
    """Bring the database to ``revision``; raises ``DatabaseUnavailable`` on failure."""
    with database_boundary(f"migrate the job database to {revision}"):
        command.upgrade(alembic_config(database_url), revision)


def downgrade(database_url: str, revision: str) -> None:
    """Step the database back to ``revision``."""
    with database_boundary(f"migrate the job database back to {revision}"):
        command.downgrade(alembic_config(database_url), revision)
