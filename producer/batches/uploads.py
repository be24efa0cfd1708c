"""An uploaded batch file's lines as rows: each line checked (UTF-8, no NUL, a
``custom_id`` not repeated) and inserted in chunks, or all of it removed again.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable
from typing import IO, Any

from sqlalchemy import delete, insert
from sqlalchemy.orm import Session, sessionmaker

from producer.batches.lines import MAX_CUSTOM_ID_CHARS, peek_custom_id
from schemas.boundary import DATABASE_ERRORS, database_boundary
from schemas.errors import InvalidRequest
from schemas.tables import BatchFileLine

INSERT_CHUNK = 1000


def store_lines(
    sessions: sessionmaker[Session],
    stream: IO[bytes],
    file_id: str,
    max_line_bytes: int,
    max_lines: int,
    *,
    pace: Callable[[int], None] | None = None,
) -> tuple[int, int]:
    """Insert the upload's lines in chunks; its size in bytes and its line count.

    ``pace`` is called with each chunk's bytes before the chunk is inserted and may
    wait (a shared budget that keeps uploads from taking the whole gateway)."""
    seen: set[str] = set()  # at most max_lines ids
    pending: list[dict[str, Any]] = []
    size = count = physical = 0
    paced = 0
    while raw := stream.readline(max_line_bytes + 2):  # room for the line's ending
        size += len(raw)
        physical += 1
        content = raw.rstrip(b"\r\n")
        if len(content) > max_line_bytes:
            raise InvalidRequest(
                f"line {physical} of the file is longer than the limit of "
                f"{max_line_bytes} bytes a line"
            )
        if not content.strip():
            continue
        if count >= max_lines:
            raise InvalidRequest(
                f"the file has more than {max_lines} request lines, the limit of one batch"
            )
        pending.append(stored_line(file_id, count, content, seen))
        count += 1
        if len(pending) >= INSERT_CHUNK:
            if pace is not None:
                pace(size - paced)
                paced = size
            _insert_lines(sessions, pending)
            pending = []
    if pending:
        if pace is not None:
            pace(size - paced)
        _insert_lines(sessions, pending)
    if count == 0:
        raise InvalidRequest("the file has no lines: a batch file holds one request a line")
    return size, count


def _insert_lines(sessions: sessionmaker[Session], lines: list[dict[str, Any]]) -> None:
    with database_boundary("store the uploaded file"), sessions.begin() as session:
        session.execute(insert(BatchFileLine), lines)


def forget_lines(sessions: sessionmaker[Session], file_id: str) -> None:
    """Remove what a refused or failed upload stored (its file row was never written)."""
    # With the database gone this fails too; the lines left belong to no file and are
    # never read.
    with contextlib.suppress(*DATABASE_ERRORS), sessions.begin() as session:
        session.execute(delete(BatchFileLine).where(BatchFileLine.file_id == file_id))


def stored_line(file_id: str, line_no: int, raw: bytes, seen: set[str]) -> dict[str, Any]:
    problem = None
    custom_id = None
    try:
        text = raw.decode("utf-8").strip()
    except UnicodeDecodeError:
        problem, text = "the line is not UTF-8 text", ""
    if "\x00" in text:
        # PostgreSQL text cannot hold NUL, and JSON never needs a raw one.
        problem, text = "the line holds a NUL character", ""
    if problem is None:
        custom_id = peek_custom_id(text)
        if custom_id is not None:
            if custom_id in seen:
                problem = f"custom_id {custom_id!r} repeats an earlier line's"
            seen.add(custom_id)
    return {
        "file_id": file_id,
        "line_no": line_no,
        "content": text,
        "custom_id": custom_id[:MAX_CUSTOM_ID_CHARS] if custom_id else None,
        "problem": problem,
    }
