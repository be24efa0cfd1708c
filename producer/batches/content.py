"""A batch file's content as bytes, for ``GET /v1/files/{id}/content``.

Each page of rows is read in a session of its own, closed before the page is handed
on: a slow reader holds no database connection while it reads. An upload's lines are
read as their text column alone (no ORM objects), the cheapest read of the largest
files a download serves.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

from sqlalchemy import Row, select
from sqlalchemy.orm import Session, sessionmaker

from producer.batches.results import (
    READ_CHUNK,
    Reader,
    keyset_pages,
    paged_error_lines,
    paged_output_lines,
)
from producer.batches.store import INPUT_PURPOSE, OUTPUT_PURPOSE
from schemas.boundary import database_boundary
from schemas.tables import Batch, BatchFile, BatchFileLine

CONTENT_PIECE_BYTES = 64 * 1024
"""A piece of content is at least this long, its last aside, and ends at a line's end."""


def file_content(sessions: sessionmaker[Session], row: BatchFile) -> Iterator[bytes]:
    """The file's content, lines each ending with a newline, in pieces of about
    ``CONTENT_PIECE_BYTES``; a file whose batch is gone has none.

    Raises ``DatabaseUnavailable`` (through :func:`schemas.boundary.database_boundary`)
    when a page cannot be read.
    """

    @contextmanager
    def read() -> Iterator[Session]:
        with database_boundary("read the file's content"), sessions() as session:
            yield session

    if row.purpose == INPUT_PURPOSE:
        texts = input_texts(read, row.id, stop=row.lines)
    else:
        with read() as session:
            batch = session.get(Batch, row.batch_id or "")
        if batch is None:
            return
        texts = (paged_output_lines if row.purpose == OUTPUT_PURPOSE else paged_error_lines)(
            read, batch
        )
    piece: list[bytes] = []
    size = 0
    for text in texts:
        encoded = text.encode() + b"\n"
        piece.append(encoded)
        size += len(encoded)
        if size >= CONTENT_PIECE_BYTES:
            yield b"".join(piece)
            piece, size = [], 0
    if piece:
        yield b"".join(piece)


def input_texts(read: Reader, file_id: str, *, stop: int) -> Iterator[str]:
    """The text of an upload's stored lines before ``stop``, in order, a page a read."""

    def page(session: Session, at: int) -> Sequence[Row[int, str]]:
        if at >= stop:
            return []
        query = (
            select(BatchFileLine.line_no, BatchFileLine.content)
            .where(
                BatchFileLine.file_id == file_id,
                BatchFileLine.line_no >= at,
                BatchFileLine.line_no < stop,
            )
            .order_by(BatchFileLine.line_no)
            .limit(READ_CHUNK)
        )
        return session.execute(query).all()

    for _line_no, content in keyset_pages(read, page, 0, lambda row: row.line_no + 1):
        yield content
