"""Opening the job database; shared so producers and workers configure it alike."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager

from sqlalchemy import Connection, Engine, create_engine, event, select
from sqlalchemy.orm import Session, sessionmaker

from schemas.tables import Job


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


def engine_of(sessions: sessionmaker[Session]) -> Engine:
    """The engine ``sessions`` are bound to (every session factory here has one)."""
    bind = sessions.kw["bind"]
    assert isinstance(bind, Engine), "job sessions are bound to one engine"
    return bind


@contextmanager
def one_statement(sessions: sessionmaker[Session]) -> Iterator[Connection]:
    """A connection for a write that is one statement, atomic on its own: in autocommit,
    so PostgreSQL spends no round trips on ``BEGIN`` and ``COMMIT`` (two of the four a
    write took, the pool's ping and the statement being the others)."""
    with engine_of(sessions).connect() as connection:
        yield connection.execution_options(isolation_level="AUTOCOMMIT")


def job_row_exists(sessions: sessionmaker[Session], job_id: str) -> bool:
    """Whether job ``job_id`` has a row; one statement. Raises SQLAlchemy's errors."""
    with one_statement(sessions) as connection:
        return connection.scalar(select(Job.id).where(Job.id == job_id)) is not None
