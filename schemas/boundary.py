"""The one place where broker and database exceptions become llmq errors.

Library errors carry what a person must never see in an HTTP body or a shared log
line: a Redis error names the host and port, a URL holds the password, an SQLAlchemy
error holds the SQL text and its parameters (an API key's hash, a prompt). So the llmq
error gets a short message built only from what llmq was doing and the kind of
failure; the library's own text goes to the log at debug level.

Use the context managers at the boundary::

    with broker_boundary("enqueue the job", then="nothing was enqueued"):
        app.send_task(...)

    with database_boundary("record the job"):
        session.execute(...)
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from urllib.parse import urlsplit

import redis
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy import exc as sa_exc

from schemas.errors import BrokerUnavailable, DatabaseUnavailable

log = logging.getLogger(__name__)

BROKER_ERRORS: tuple[type[Exception], ...] = (redis.RedisError, KombuOperationalError, OSError)
"""What Redis, kombu and the sockets under them raise."""

DATABASE_ERRORS: tuple[type[Exception], ...] = (sa_exc.SQLAlchemyError,)
"""What SQLAlchemy raises, wrapping every driver's errors."""


def broker_error(exc: BaseException, *, doing: str, then: str | None = None) -> BrokerUnavailable:
    """A ``BrokerUnavailable`` saying what failed, never the URL or the library's text.

    ``doing`` completes "could not ..." ("enqueue the job"); ``then`` adds what it
    means for the caller ("nothing was enqueued"). The full error is logged at debug.
    """
    log.debug("broker error while trying to %s", doing, exc_info=exc)
    return BrokerUnavailable(_message(doing, _broker_reason(exc), then))


def database_error(
    exc: BaseException, *, doing: str, then: str | None = None
) -> DatabaseUnavailable:
    """A ``DatabaseUnavailable`` saying what failed, never the host, SQL or parameters.

    Same arguments as :func:`broker_error`.
    """
    log.debug("database error while trying to %s", doing, exc_info=exc)
    return DatabaseUnavailable(_message(doing, _database_reason(exc), then))


def broker_boundary(doing: str, *, then: str | None = None) -> AbstractContextManager[None]:
    """Raise :func:`broker_error` for any broker exception in the block."""
    return _boundary(BROKER_ERRORS, broker_error, doing, then)


def database_boundary(doing: str, *, then: str | None = None) -> AbstractContextManager[None]:
    """Raise :func:`database_error` for any SQLAlchemy exception in the block."""
    return _boundary(DATABASE_ERRORS, database_error, doing, then)


@contextmanager
def _boundary(
    errors: tuple[type[Exception], ...],
    convert: Callable[..., Exception],
    doing: str,
    then: str | None,
) -> Iterator[None]:
    try:
        yield
    except errors as exc:
        raise convert(exc, doing=doing, then=then) from exc


def redact_url(url: str) -> str:
    """``url`` with any user and password replaced by ``***``, for an operator's eyes.

    Every ``;``-separated entry (a ``sentinel://`` list) is redacted; the query, which
    may hold a sentinel password, is dropped.
    """
    return ";".join(_redact_one(part) for part in url.split(";"))


def _redact_one(url: str) -> str:
    try:
        parts = urlsplit(url)
    except ValueError:
        return "(an unparsable URL)"
    if "@" not in parts.netloc and not parts.query:
        return url
    netloc = parts.netloc.rpartition("@")[2]
    if "@" in parts.netloc:
        netloc = "***@" + netloc
    return parts._replace(netloc=netloc, query="", fragment="").geturl()


def _message(doing: str, reason: str, then: str | None) -> str:
    return f"could not {doing}: {reason}" + (f"; {then}" if then else "")


def _broker_reason(exc: BaseException) -> str:
    # kombu wraps the redis-py error it got; the cause says what really happened.
    if isinstance(exc, KombuOperationalError) and exc.__cause__ is not None:
        exc = exc.__cause__
    if isinstance(exc, redis.AuthenticationError):
        return "Redis refused the credentials"
    if isinstance(exc, redis.TimeoutError | TimeoutError):
        return "Redis did not answer in time"
    if isinstance(exc, redis.ReadOnlyError):
        return "Redis is a read-only replica (a failover may be under way)"
    if isinstance(exc, redis.ConnectionError | KombuOperationalError | OSError):
        return "Redis is unreachable"
    if isinstance(exc, redis.ResponseError):
        return "Redis refused the command"
    return f"Redis failed ({type(exc).__name__})"


def _database_reason(exc: BaseException) -> str:
    if isinstance(exc, sa_exc.TimeoutError):
        return "no database connection came free in time"
    # Read only to classify: the text itself is never shown.
    text = str(getattr(exc, "orig", None) or exc).lower()
    if isinstance(exc, sa_exc.ProgrammingError) or "no such " in text:
        return "the job database lacks llmq's tables or columns (run: llmq db upgrade)"
    if isinstance(exc, sa_exc.IntegrityError):
        return "the job database refused the write"
    if isinstance(exc, sa_exc.OperationalError | sa_exc.InterfaceError):
        return "the job database is unreachable or refused the operation"
    return f"the job database failed ({type(exc).__name__})"
