"""Silent streams ask the job rows whether their jobs ended: in batches, off the loop."""

from __future__ import annotations

import asyncio
from collections.abc import Collection
from functools import partial

import pytest
import redis
from sqlalchemy import create_engine, update

from producer.aio import AsyncClient
from producer.client import Client
from producer.jobs import ended_rows, terminal_event_from_row
from producer.terminal_rows import TerminalRows
from schemas.db import make_engine, make_sessions
from schemas.errors import JobNotFound
from schemas.events import ErrorEvent, FinalEvent, JobOutcome, Timings, Usage
from schemas.jobs import JobStatus
from schemas.settings import Settings
from schemas.tables import Job
from workers.publisher import StreamPublisher

pytestmark = pytest.mark.integration

REQUEST = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}


def _end(database_url: str, job_id: str, status: JobStatus, **values: object) -> None:
    """Write an outcome on the row and nothing on the stream (as if its events were lost)."""
    engine = create_engine(database_url)
    with engine.begin() as connection:
        connection.execute(
            update(Job).where(Job.id == job_id).values(status=status.value, **values)
        )
    engine.dispose()


def _queued_jobs(settings: Settings, count: int) -> list[str]:
    with Client(settings) as client:
        return [client.submit(REQUEST, tier="small", priority="batch").job_id for _ in range(count)]


def test_ended_rows_reads_only_the_rows_that_ended(integration_settings: Settings) -> None:
    done, failed, queued = _queued_jobs(integration_settings, 3)
    _end(integration_settings.database_url, done, JobStatus.DONE, output_text="all done")
    _end(integration_settings.database_url, failed, JobStatus.FAILED, error="engine died")
    db = make_engine(integration_settings.database_url)
    try:
        ended, found = ended_rows(make_sessions(db), [done, failed, queued, "nosuchjob", "\x00"])
    finally:
        db.dispose()
    assert found == {done, failed, queued}
    assert set(ended) == {done, failed}
    assert ended[done].output_text == "all done"


def test_asks_within_the_window_share_one_read(integration_settings: Settings) -> None:
    done, queued = _queued_jobs(integration_settings, 2)
    _end(integration_settings.database_url, done, JobStatus.DONE, output_text="answer")
    db = make_engine(integration_settings.database_url)
    rows = TerminalRows(
        partial(ended_rows, make_sessions(db)), terminal_event_from_row, window_s=0.05
    )

    async def ask() -> list[object]:
        asks = [rows.terminal(done, 7), rows.terminal(queued, 3), rows.terminal("nosuchjob", 0)]
        answers = await asyncio.wait_for(asyncio.gather(*asks, return_exceptions=True), 10)
        await rows.aclose()
        return answers

    async def abandon() -> None:  # an ask still waiting when its loop ends
        asking = asyncio.ensure_future(rows.terminal(done, 1))
        await asyncio.sleep(0)
        asking.cancel()

    try:
        asyncio.run(abandon())
        final, running, missing = asyncio.run(ask())  # a new loop is answered all the same
    finally:
        db.dispose()
    assert rows.reads == 1
    assert isinstance(final, FinalEvent) and (final.seq, final.text) == (7, "answer")
    assert running is None
    assert isinstance(missing, JobNotFound)


def test_an_async_stream_whose_events_are_lost_ends_from_the_row(
    integration_settings: Settings,
) -> None:
    done, cancelled = _queued_jobs(integration_settings, 2)
    _end(integration_settings.database_url, done, JobStatus.DONE, output_text="from the row")
    _end(integration_settings.database_url, cancelled, JobStatus.CANCELLED)

    async def read() -> tuple[list[object], list[object]]:
        async with AsyncClient(integration_settings) as client:
            first = [e async for e in client.events(done, timeout=20)]
            second = [e async for e in client.events(cancelled, timeout=20)]
        return first, second

    first, second = asyncio.run(read())
    assert len(first) == 1 and isinstance(first[0], FinalEvent)
    assert first[0].text == "from the row"
    assert len(second) == 1 and isinstance(second[0], ErrorEvent)


def test_an_answer_streamed_while_the_row_is_read_reaches_the_async_reader(
    integration_settings: Settings,
) -> None:
    """A job may stream its whole answer between a silent reader's read of the log and
    its read of the row (a short answer, while the row's read waits its window): the
    reader still gets every token, and then the job's own final event."""
    (job_id,) = _queued_jobs(integration_settings, 1)
    redis_client = redis.Redis.from_url(integration_settings.broker_url)
    publisher = StreamPublisher(redis_client, job_id, ttl_s=600)

    async def read() -> list[object]:
        async with AsyncClient(integration_settings) as client:
            rows = client._rows
            real_read = rows._read

            def streamed_meanwhile(job_ids: Collection[str]) -> tuple[dict[str, Job], set[str]]:
                # The worker's order: every event in the log, the row ended, then the
                # final event (after the row is read here).
                if publisher.seq == 0:
                    for piece in ("an ", "answer"):
                        publisher.token(piece)
                    _end(integration_settings.database_url, job_id, JobStatus.DONE)
                return real_read(job_ids)

            rows._read = streamed_meanwhile
            events = []
            async for event in client.events(job_id, timeout=20):
                events.append(event)
                if len(events) == 2:  # both tokens out: the job's final event follows
                    publisher.final(_outcome("an answer"), worker_id="w")
            return events

    try:
        events = asyncio.run(read())
    finally:
        redis_client.close()
    assert [type(e).__name__ for e in events] == ["TokenEvent", "TokenEvent", "FinalEvent"]
    assert "".join(e.text for e in events[:2]) == "an answer"  # type: ignore[attr-defined]
    assert events[2].text == "an answer"  # type: ignore[attr-defined]


def _outcome(text: str) -> JobOutcome:
    usage = Usage(prompt_tokens=1, completion_tokens=2)
    return JobOutcome(text, "stop", usage, Timings(queue_wait_ms=0, total_ms=1))
