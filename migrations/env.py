"""Alembic environment: migrates the database named in the config against our metadata."""

from __future__ import annotations

from alembic import context
from sqlalchemy import create_engine, pool

from schemas.tables import metadata

config = context.config


def run_offline() -> None:
    context.configure(
        url=config.get_main_option("sqlalchemy.url"),
        target_metadata=metadata,
        literal_binds=True,
        render_as_batch=True,
    )
    with context.begin_transaction():
        context.run_migrations()


def run_online() -> None:
    url = config.get_main_option("sqlalchemy.url")
    assert url is not None, "sqlalchemy.url must be set"
    engine = create_engine(url, poolclass=pool.NullPool)
    with engine.connect() as connection:
        # Batch mode lets later ALTERs work on SQLite too.
        context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
        with context.begin_transaction():
            context.run_migrations()
    engine.dispose()


if context.is_offline_mode():
    run_offline()
else:
    run_online()
