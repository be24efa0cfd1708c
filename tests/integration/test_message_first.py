"""A new interactive job's message goes before its row, and the worker waits for the row
(real Redis and database, a scripted engine)."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager, contextmanager
from typing import Any

import pytest
import redis
from sqlalchemy import Engine, event

from producer import client as client_module
from producer.client import Client
from producer.enqueue import Enqueuer
from producer.jobs import new_job_id
from schemas.db import make_engine
from schemas.errors import DatabaseUnavailable, InvalidRequest
from schemas.jobs import JobStatus
from schemas.messages import JobMessage, celery_job_message
from schemas.queues import Priority, Tier, event_log_key, queue_name
from schemas.settings import Settings
from tests.conftest import job_row
from tests.integration.test_early_start import RecordingEngine, hint_of
from tests.integration.test_runner import runtime_for
from tests.integration.test_submit import job_rows, queued_messages
from workers import job_runner
from workers.job_runner import run_job
from workers.jobs import claim_job
from workers.received_starts import JobHint

pytestmark = pytest.mark.integration

INTERACTIVE = queue_name(Tier.SMALL, Priority.INTERACTIVE)
REQUEST = {"messages": [{"role": "user", "content": "say hi"}], "max_tokens": 4}


@contextmanager
def on_statement(
    engine: Engine, starting: str, act: Callable[[], None], *, when: str = "before"
) -> Iterator[None]:
    """Run ``act`` each time a statement starting with ``starting`` is about to reach
    the database (``when`` "before") or has run ("after")."""
    hook = f"{when}_cursor_execute"

    def listener(_conn: Any, _cursor: Any, statement: str, *_args: Any) -> None:
        if statement.lstrip().upper().startswith(starting):
            act()

    event.listen(engine, hook, listener)
    try:
        yield
    finally:
        event.remove(engine, hook, listener)


def before_each_insert(engine: Engine, act: Callable[[], None]) -> AbstractContextManager[None]:
    """Run ``act`` as the job row's INSERT is about to reach the database."""
    return on_statement(engine, "INSERT INTO JOBS", act)


def messages_on(settings: Settings, queue: str) -> list[dict[str, object]]:
    return queued_messages(settings).get(queue, [])


def count_into(seen: list[int], settings: Settings) -> Callable[[], None]:
    """Records how many interactive messages are queued each time it is called."""
    return lambda: seen.append(len(messages_on(settings, INTERACTIVE)))


def test_an_interactive_message_is_on_its_queue_before_the_row_is_written(
    integration_settings: Settings,
) -> None:
    engine = make_engine(integration_settings.database_url)
    seen: list[int] = []
    with (
        Client(integration_settings, db_engine=engine) as client,
        before_each_insert(engine, count_into(seen, integration_settings)),
    ):
        client.submit(REQUEST)
        # With an idempotency key the row goes first: a replay must push nothing.
        client.submit(REQUEST, idempotency_key="k1")
        client.submit(REQUEST, idempotency_key="k1")
        client.submit(REQUEST, priority="batch")  # no copy of the request: row first
    engine.dispose()
    assert seen == [1, 1, 2, 2]
    assert len(messages_on(integration_settings, INTERACTIVE)) == 2
    assert len(job_rows(integration_settings)) == 3


def test_the_row_waits_row_write_delay_ms_after_its_message_and_only_then(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    delay_s = 0.5
    settings = integration_settings.model_copy(update={"row_write_delay_ms": delay_s * 1000})
    engine = make_engine(settings.database_url)
    pushed_at: list[float] = []
    inserted_at: list[float] = []
    push = Enqueuer.push

    def timed_push(self: Enqueuer, message: JobMessage, **options: Any) -> None:
        push(self, message, **options)
        pushed_at.append(time.monotonic())

    monkeypatch.setattr(Enqueuer, "push", timed_push)
    with (
        Client(settings, db_engine=engine) as client,
        before_each_insert(engine, lambda: inserted_at.append(time.monotonic())),
    ):
        client.submit(REQUEST)
        started = time.monotonic()
        # The row goes first here (a replay must push nothing): nothing to wait for.
        client.submit(REQUEST, idempotency_key="k1")
        keyed_s = time.monotonic() - started
    engine.dispose()
    assert len(pushed_at) == len(inserted_at) == 2
    assert inserted_at[0] - pushed_at[0] >= delay_s  # message, then the row, delayed
    assert inserted_at[1] < pushed_at[1]  # row, then the message
    assert keyed_s < delay_s
    assert len(job_rows(settings)) == 2


def test_a_row_that_cannot_be_written_takes_its_message_back(
    integration_settings: Settings,
) -> None:
    engine = make_engine(integration_settings.database_url)
    seen: list[int] = []
    with Client(integration_settings, db_engine=engine) as client:
        kept = client.submit(REQUEST)
        with (
            before_each_insert(engine, count_into(seen, integration_settings)),
            pytest.raises(InvalidRequest, match="that job id is taken"),
        ):
            client.submit({**REQUEST, "max_tokens": 5}, job_id=kept.job_id)
    engine.dispose()
    assert seen == [2]  # pushed, then taken back
    assert len(messages_on(integration_settings, INTERACTIVE)) == 1
    hint = hint_of(integration_settings, kept.job_id)
    assert hint is not None and hint.request["max_tokens"] == 4  # the first job's own
    assert [row.id for row in job_rows(integration_settings)] == [kept.job_id]


def test_a_database_that_is_down_leaves_no_message(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    down = integration_settings.model_copy(
        update={"database_url": "postgresql+psycopg://llmq@127.0.0.1:1/none"}
    )
    taken_back: list[bool] = []
    withdraw = Enqueuer.withdraw

    def recorded(self: Enqueuer, message: JobMessage) -> bool:
        taken_back.append(withdraw(self, message))
        return taken_back[-1]

    monkeypatch.setattr(Enqueuer, "withdraw", recorded)
    with (
        Client(down, warm=False) as client,
        pytest.raises(DatabaseUnavailable, match="record the job"),
    ):
        client.submit(REQUEST)
    assert taken_back == [True]  # pushed, then taken back
    assert queued_messages(integration_settings) == {}


def test_a_row_that_came_late_gets_its_message_again(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(client_module, "ROW_WAIT_S", 0.0)  # every insert is "late"
    with Client(integration_settings) as client:
        job_id = client.submit(REQUEST).job_id
    first, again = reversed(messages_on(integration_settings, INTERACTIVE))  # LPUSH: newest first
    assert first["headers"]["id"] == again["headers"]["id"] == job_id  # type: ignore[index]
    assert first["headers"]["kwargsrepr"] == "{...}"  # type: ignore[index]
    assert again["headers"]["kwargsrepr"] == "{}"  # type: ignore[index]  # no copy: no wait


def test_the_worker_waits_for_a_row_written_after_its_message(
    integration_settings: Settings,
) -> None:
    engine = RecordingEngine(["Hel", "lo"])
    runtime = runtime_for(integration_settings, engine)
    db = make_engine(integration_settings.database_url)
    workers: list[threading.Thread] = []

    def worker_takes_the_message() -> None:
        (message,) = messages_on(integration_settings, INTERACTIVE)
        job_id = str(message["headers"]["id"])  # type: ignore[index]
        hint = hint_of(integration_settings, job_id)
        thread = threading.Thread(target=run_job, args=(runtime, job_id, hint), daemon=True)
        thread.start()
        workers.append(thread)
        time.sleep(0.3)  # the worker starts the engine and finds no row yet

    looks: list[str] = []
    worker_db = runtime.sessions.kw["bind"]
    with (
        on_statement(worker_db, "SELECT JOBS.ID", lambda: looks.append("look")),
        Client(integration_settings, db_engine=db) as client,
        before_each_insert(db, worker_takes_the_message),
    ):
        handle = client.submit(REQUEST)
        (worker,) = workers
        worker.join(timeout=10)
        assert not worker.is_alive()
        assert handle.result(timeout=5).text == "Hello"
        assert client.status(handle.job_id) is JobStatus.DONE
    db.dispose()
    assert looks  # its claim found no row, and it looked for the row until it came
    (request_id,) = engine.request_ids
    assert "early" in request_id and engine.read == [request_id]


def test_a_message_whose_row_never_comes_is_dropped_after_the_wait(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(job_runner, "ROW_WAIT_S", 0.3)
    engine = RecordingEngine(["never"])
    runtime = runtime_for(integration_settings, engine)
    job_id = new_job_id()
    message = celery_job_message(job_id, Tier.SMALL, Priority.INTERACTIVE, request=REQUEST)
    assert message.carries_request
    started = time.monotonic()
    run_job(runtime, job_id, JobHint(request=REQUEST, priority="interactive"))
    assert time.monotonic() - started >= 0.3
    (request_id,) = engine.request_ids
    assert request_id in engine.closed and engine.read == []  # started, aborted, unread
    assert job_rows(integration_settings) == []
    assert not redis.Redis.from_url(integration_settings.broker_url).exists(event_log_key(job_id))


def test_a_row_written_just_after_a_failed_claim_is_claimed(
    integration_settings: Settings,
) -> None:
    runtime = runtime_for(integration_settings, RecordingEngine([]))
    worker_db = runtime.sessions.kw["bind"]
    job_id = new_job_id()
    with Client(integration_settings) as client:
        written: list[str] = []

        def write_the_row_once() -> None:
            if not written:
                written.append(client.submit(REQUEST, job_id=job_id).job_id)

        with on_statement(worker_db, "UPDATE JOBS", write_the_row_once, when="after"):
            claimed = claim_job(runtime.sessions, job_id, "small-w@test", row_wait_s=1.0)
    assert written == [job_id]
    assert claimed is not None and claimed.attempt == 1
    assert job_row(integration_settings.database_url, job_id).status == JobStatus.RUNNING
