"""Opening the job database; shared so producers and workers configure it alike."""

from __future__ import annotations

from sqlalchemy import Engine, create_engine, event
from sqlalchemy.orm import Session, sessionmaker


def make_engine(database_url: str) -> Engine:
    """Create an engine for ``database_url`` (SQLite or PostgreSQL).

    SQLite gets WAL and a busy timeout so a producer and a worker can share one file.
    """
    if database_url.startswith("sqlite"):
        engine = create_engine(database_url, connect_args={"timeout": 30})
        event.listen(engine, "connect", _sqlite_pragmas)
        return engine
    return create_engine(database_url, pool_pre_ping=True, pool_size=20, max_overflow=20)


def _sqlite_pragmas(dbapi_connection: object, _record: object) -> None:
    cursor = dbapi_connection.cursor()  # type: ignore[attr-defined]
    cursor.execute("PRAGMA journal_mode=WAL")
    cursor.execute("PRAGMA synchronous=NORMAL")
    cursor.close()


def make_sessions(engine: Engine) -> sessionmaker[Session]:
    """Session factory whose objects stay readable after commit."""
    return sessionmaker(engine, expire_on_commit=False)
