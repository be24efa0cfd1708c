"""Many clients downloading a batch file at once, however slowly each reads, take a
bounded share of the gateway: over real Redis and PostgreSQL, with the gateway served
by uvicorn.

Socket buffers let a server write a few MiB into every connection whatever its reader
does, so unpaced readers that never read still make the gateway read and send the
whole file each, all at once.
"""

from __future__ import annotations

import io
import socket
import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager

import pytest
from sqlalchemy import event
from sqlalchemy.engine import Engine

from producer.batches import store
from producer.client import Client
from producer.gateway.keys import create_key
from producer.gateway.routes import batches as batch_routes
from schemas.settings import Settings
from tests.gateway_server import running_gateway
from tests.integration.test_batches import clear_batches, jsonl, line

pytestmark = pytest.mark.integration

LINES = 10_000
"""About 1.5 MB: 20 pages of the 500 rows one read takes."""
READERS = 8
"""Connections that ask for the file's content and never read it."""


@pytest.fixture
def stored(integration_settings: Settings) -> Iterator[tuple[Settings, str, dict[str, str]]]:
    """The settings, a 10,000-line file and its owner's key."""
    clear_batches(integration_settings.database_url)
    with Client(integration_settings) as client:
        identity, secret = create_key(client.sessions, "reader", rate_limit_per_min=60_000)
        body = jsonl(*(line(f"r{i}") for i in range(LINES)))
        row = store.create_file(
            client.sessions,
            io.BytesIO(body),
            filename="r.jsonl",
            purpose="batch",
            owner=identity.id,
            max_line_bytes=1 << 20,
        )
    yield integration_settings, row.id, {"Authorization": f"Bearer {secret}"}
    clear_batches(integration_settings.database_url)


@contextmanager
def pages_read() -> Iterator[list[int]]:
    """Counts the pages of an upload's lines any engine reads meanwhile."""
    pages: list[int] = []

    def count(_conn: object, _cursor: object, statement: str, *_rest: object) -> None:
        if "FROM batch_file_lines" in statement and "LIMIT" in statement.upper():
            pages.append(1)

    event.listen(Engine, "before_cursor_execute", count)
    try:
        yield pages
    finally:
        event.remove(Engine, "before_cursor_execute", count)


@contextmanager
def stalled_readers(url: str, file_id: str, headers: dict[str, str], count: int) -> Iterator[None]:
    """``count`` connections that ask for the file's content and never read it."""
    host, port = url.removeprefix("http://").split(":")
    request = (
        f"GET /v1/files/{file_id}/content HTTP/1.1\r\nHost: {host}\r\n"
        f"Authorization: {headers['Authorization']}\r\n\r\n"
    ).encode()
    with ExitStack() as stack:
        for _ in range(count):
            sock = stack.enter_context(socket.create_connection((host, int(port))))
            sock.sendall(request)
        yield


def pages_read_by_stalled_readers(
    stored: tuple[Settings, str, dict[str, str]], *, rate: int, seconds: float
) -> int:
    """Pages of the file read while 8 readers that never read wait ``seconds``, every
    download sharing ``rate`` bytes a second (a piece, 64 KiB, ahead)."""
    base, file_id, headers = stored
    settings = base.model_copy(update={"download_bytes_per_s": rate})
    with (
        running_gateway(settings) as url,
        pages_read() as pages,
        stalled_readers(url, file_id, headers, READERS),
    ):
        time.sleep(seconds)
        return len(pages)


def test_readers_that_never_read_are_served_from_one_paced_budget(
    stored: tuple[Settings, str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch_routes, "DOWNLOAD_BURST_BYTES", 64 * 1024)
    # 256 KiB a second for every download together: 2 s is about 6 pages of the file.
    read = pages_read_by_stalled_readers(stored, rate=256 * 1024, seconds=2.0)
    # Unpaced, each reader's socket buffers take the whole file: 8 x 20 pages. Paced,
    # about the budget's 9 pieces (a piece is one or two pages), fewer on a busy host.
    assert 1 <= read <= 60, f"{read} pages read for {READERS} readers that read nothing"


def test_readers_arriving_together_read_no_page_before_the_budget_holds_it(
    stored: tuple[Settings, str, dict[str, str]], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(batch_routes, "DOWNLOAD_BURST_BYTES", 64 * 1024)
    # One piece (64 KiB) a second for every download together, one piece ahead.
    read = pages_read_by_stalled_readers(stored, rate=64 * 1024, seconds=1.5)
    # Had each reader read its first page before waiting for the budget, all 8 pages
    # would be read at once; paced first, about a piece a second is (a piece is one
    # or two pages).
    assert 1 <= read <= 5, f"{read} pages read in 1.5 s at one piece a second"
