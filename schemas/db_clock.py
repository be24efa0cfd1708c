"""The database's clock, as SQL: job times are read off one clock, not each host's.

Producers and workers run on different hosts whose clocks drift apart. A deadline set
by a producer whose clock runs a minute fast would give a worker a minute less; a queue
wait measured across two clocks can come out negative. So every moment that another
host compares against (``created_at``, ``started_at``, ``deadline_at``, ``finished_at``)
is written as the database's own ``now``, and durations are measured between two such
moments, or on one host's monotonic clock.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime
from typing import Any

from sqlalchemy import BindParameter, DateTime, Float, bindparam
from sqlalchemy.ext.compiler import compiles
from sqlalchemy.sql.compiler import SQLCompiler
from sqlalchemy.sql.functions import FunctionElement


class db_now(FunctionElement[datetime]):  # noqa: N801 (reads as the SQL function it is)
    """The database's current time, plus ``seconds`` if given (a number or a named
    parameter, for a statement built once and run with each job's own value).

    PostgreSQL: ``clock_timestamp()`` (the moment the statement runs, not the start of
    its transaction). SQLite: ``strftime`` with milliseconds, in the text form
    SQLAlchemy stores; SQLite is a local file, so its clock is the host's.
    """

    type = DateTime(timezone=True)
    inherit_cache = True
    name = "db_now"

    def __init__(self, seconds: float | BindParameter[float] | None = None) -> None:
        if seconds is None:
            super().__init__()
        elif isinstance(seconds, BindParameter):
            super().__init__(seconds)
        else:
            super().__init__(bindparam(None, float(seconds), type_=Float()))


@compiles(db_now)
def _generic(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
    return "CURRENT_TIMESTAMP"


def _dialect_clock(now: str, shifted: str) -> Callable[..., str]:
    """A compiler of ``db_now`` for one dialect: ``now`` without an offset, else
    ``shifted`` with the offset's SQL in place of ``{offset}``."""

    def compile_clock(element: db_now, compiler: SQLCompiler, **kw: Any) -> str:
        clauses = list(element.clauses)
        if not clauses:
            return now
        return shifted.format(offset=compiler.process(clauses[0], **kw))

    return compile_clock


compiles(db_now, "postgresql")(
    _dialect_clock("clock_timestamp()", "(clock_timestamp() + make_interval(secs => {offset}))")
)
# SQLite's modifier is text: '+12.5 seconds'.
compiles(db_now, "sqlite")(
    _dialect_clock(
        "strftime('%Y-%m-%d %H:%M:%f', 'now')",
        "strftime('%Y-%m-%d %H:%M:%f', 'now', printf('%+f seconds', {offset}))",
    )
)
