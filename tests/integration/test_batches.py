"""The Batch API over real Redis and PostgreSQL: the official openai SDK against the
gateway, ownership, pagination, cancel, and enqueuing that waits out a full queue.

No worker runs here: a job's outcome is written to its row as a worker would.
The same flow through a real worker is in tests/e2e/test_batches_e2e.py.
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator
from datetime import timedelta

import openai
import pytest
import redis
from sqlalchemy import create_engine, func, select, text, update
from sqlalchemy.orm import Session

from producer.batches import store
from producer.batches.enqueue import claim, enqueue_batch
from producer.batches.retention import expire_files
from producer.cli import main
from producer.client import Client
from schemas.jobs import JobStatus
from schemas.queues import Priority, Tier, queue_name
from schemas.settings import Settings, TierConfig
from schemas.tables import Batch, BatchFile, BatchFileLine, Job, utcnow
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import new_key

pytestmark = pytest.mark.integration


def line(custom_id: str, text_: str = "hello", model: str = "small") -> str:
    body = {"model": model, "messages": [{"role": "user", "content": text_}], "max_tokens": 4}
    return json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    )


def jsonl(*lines: str) -> bytes:
    return ("\n".join(lines) + "\n").encode()


def clear_batches(url: str) -> None:
    engine = create_engine(url)
    with engine.begin() as conn:
        for table in ("batch_line_errors", "batches", "batch_file_lines", "batch_files"):
            conn.execute(text(f"DELETE FROM {table}"))
    engine.dispose()


@pytest.fixture
def settings(integration_settings: Settings) -> Settings:
    clear_batches(integration_settings.database_url)
    return integration_settings


@pytest.fixture
def gateway_url(settings: Settings) -> Iterator[str]:
    with running_gateway(settings) as url:
        yield url


def sdk(url: str, key: str) -> openai.OpenAI:
    return openai.OpenAI(base_url=url + "/v1", api_key=key, max_retries=0)


def batch_jobs(url: str, batch_id: str) -> list[Job]:
    engine = create_engine(url)
    with Session(engine) as session:
        jobs = list(session.scalars(select(Job).where(Job.batch_id == batch_id)))
    engine.dispose()
    return jobs


def finish_jobs(url: str, batch_id: str) -> None:
    """Write each queued job's answer as a worker would."""
    engine = create_engine(url)
    with engine.begin() as conn:
        conn.execute(
            update(Job)
            .where(Job.batch_id == batch_id)
            .values(
                status=JobStatus.DONE.value,
                output_text="hi there",
                finish_reason="stop",
                prompt_tokens=3,
                completion_tokens=2,
                total_ms=5.0,
                finished_at=utcnow(),
            )
        )
    engine.dispose()


def wait_for(check: object, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not check():  # type: ignore[operator]
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.1)


def test_a_batch_through_the_openai_sdk(settings: Settings, gateway_url: str) -> None:
    client = sdk(gateway_url, new_key(settings, "owner"))
    upload = jsonl(line("a"), line("b", model="auto"), "{not json", line("c"))
    created = client.files.create(file=("requests.jsonl", io.BytesIO(upload)), purpose="batch")
    assert created.purpose == "batch"
    assert created.bytes == len(upload)
    assert client.files.retrieve(created.id).filename == "requests.jsonl"
    assert client.files.content(created.id).content == upload

    batch = client.batches.create(
        input_file_id=created.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    assert batch.status in ("validating", "in_progress")
    assert batch.request_counts is not None and batch.request_counts.total == 4
    wait_for(lambda: len(batch_jobs(settings.database_url, batch.id)) == 3)
    jobs = batch_jobs(settings.database_url, batch.id)
    assert {job.priority for job in jobs} == {Priority.BATCH.value}
    assert sorted(job.custom_id or "" for job in jobs) == ["a", "b", "c"]
    assert all(job.deadline_at is not None for job in jobs)

    running = client.batches.retrieve(batch.id)
    assert running.status == "in_progress"
    assert running.request_counts is not None and running.request_counts.failed == 1

    finish_jobs(settings.database_url, batch.id)
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed", done
    assert done.request_counts is not None
    assert (done.request_counts.completed, done.request_counts.failed) == (3, 1)
    assert done.completed_at is not None and done.output_file_id and done.error_file_id

    output = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    assert sorted(x["custom_id"] for x in output) == ["a", "b", "c"]
    first = output[0]
    assert first["error"] is None and first["response"]["status_code"] == 200
    assert first["response"]["body"]["object"] == "chat.completion"
    assert first["response"]["body"]["choices"][0]["message"]["content"] == "hi there"
    errors = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
    assert len(errors) == 1 and errors[0]["response"] is None
    assert errors[0]["error"]["code"] == "invalid_request"
    assert client.files.retrieve(done.output_file_id).purpose == "batch_output"


def test_a_completions_batch_answers_text_completions(settings: Settings, gateway_url: str) -> None:
    client = sdk(gateway_url, new_key(settings, "owner"))
    body = {"model": "small", "prompt": "Once upon a time", "max_tokens": 4}
    chat_line = line("chat")  # a chat line in a completions batch is refused by its url
    upload = jsonl(
        json.dumps({"custom_id": "p", "method": "POST", "url": "/v1/completions", "body": body}),
        chat_line,
    )
    created = client.files.create(file=("prompts.jsonl", io.BytesIO(upload)), purpose="batch")
    batch = client.batches.create(
        input_file_id=created.id, endpoint="/v1/completions", completion_window="24h"
    )
    wait_for(lambda: len(batch_jobs(settings.database_url, batch.id)) == 1)
    [job] = batch_jobs(settings.database_url, batch.id)
    assert job.request is not None and job.request["raw_prompt"] is True
    assert job.request["messages"] == [{"role": "user", "content": "Once upon a time"}]

    finish_jobs(settings.database_url, batch.id)
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.output_file_id and done.error_file_id
    [answer] = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    assert answer["custom_id"] == "p"
    reply = answer["response"]["body"]
    assert reply["object"] == "text_completion"
    assert reply["choices"][0]["text"] == "hi there"
    [error] = [json.loads(x) for x in client.files.content(done.error_file_id).text.splitlines()]
    assert "/v1/completions" in error["error"]["message"]


def test_another_key_sees_none_of_it(settings: Settings, gateway_url: str) -> None:
    owner = sdk(gateway_url, new_key(settings, "owner"))
    other = sdk(gateway_url, new_key(settings, "other"))
    uploaded = owner.files.create(file=("r.jsonl", io.BytesIO(jsonl(line("a")))), purpose="batch")
    batch = owner.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    for call in (
        lambda: other.files.retrieve(uploaded.id),
        lambda: other.files.content(uploaded.id),
        lambda: other.batches.retrieve(batch.id),
        lambda: other.batches.cancel(batch.id),
        lambda: other.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
        ),
    ):
        with pytest.raises(openai.NotFoundError):
            call()
    assert other.batches.list().data == []
    assert [b.id for b in owner.batches.list().data] == [batch.id]


def test_listing_pages_with_limit_and_after(settings: Settings, gateway_url: str) -> None:
    client = sdk(gateway_url, new_key(settings, "owner"))
    uploaded = client.files.create(file=("r.jsonl", io.BytesIO(jsonl(line("a")))), purpose="batch")
    made = [
        client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="1h"
        ).id
        for _ in range(3)
    ]
    first = client.batches.list(limit=2)
    assert [b.id for b in first.data] == made[::-1][:2] and first.has_more
    rest = client.batches.list(limit=2, after=first.data[-1].id)
    assert [b.id for b in rest.data] == made[:1] and not rest.has_more
    assert [b.id for b in client.batches.list(limit=2)] == made[::-1]  # every page


def test_bad_requests_are_400s(settings: Settings, gateway_url: str) -> None:
    client = sdk(gateway_url, new_key(settings, "owner"))
    with pytest.raises(openai.BadRequestError):
        client.files.create(file=("r.jsonl", io.BytesIO(b"\n\n")), purpose="batch")
    with pytest.raises(openai.BadRequestError):
        client.files.create(file=("r.jsonl", io.BytesIO(jsonl(line("a")))), purpose="fine-tune")
    uploaded = client.files.create(file=("r.jsonl", io.BytesIO(jsonl(line("a")))), purpose="batch")
    with pytest.raises(openai.BadRequestError):
        client.batches.create(
            input_file_id=uploaded.id, endpoint="/v1/moderations", completion_window="24h"
        )
    with pytest.raises(openai.BadRequestError):
        client.batches.create(
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="forever",  # type: ignore[arg-type]
        )


def test_cancel_stops_the_rest(settings: Settings, gateway_url: str) -> None:
    client = sdk(gateway_url, new_key(settings, "owner"))
    upload = jsonl(*(line(f"r{i}") for i in range(5)))
    uploaded = client.files.create(file=("r.jsonl", io.BytesIO(upload)), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    wait_for(lambda: len(batch_jobs(settings.database_url, batch.id)) == 5)
    cancelled = client.batches.cancel(batch.id)
    assert cancelled.status in ("cancelling", "cancelled")
    assert cancelled.cancelling_at is not None
    wait_for(lambda: client.batches.retrieve(batch.id).status == "cancelled")
    statuses = {job.status for job in batch_jobs(settings.database_url, batch.id)}
    assert statuses == {JobStatus.CANCELLED.value}
    final = client.batches.retrieve(batch.id)
    assert final.error_file_id is not None and final.output_file_id is None
    errors = client.files.content(final.error_file_id).text.splitlines()
    assert {json.loads(x)["error"]["code"] for x in errors} == {"batch_cancelled"}


def test_an_expired_batch_cancels_its_unfinished_lines(settings: Settings) -> None:
    with Client(settings) as client:
        batch = _new_batch(client, [line("a"), line("b")], window="2s")
        assert enqueue_batch(client, batch.id, holder="test")
        time.sleep(2.1)
        expired = store.refresh_batch(client.sessions, batch.id, cancel_job=client.cancel)
    assert expired.status == "expired" and expired.expired_at is not None
    statuses = {job.status for job in batch_jobs(settings.database_url, batch.id)}
    assert statuses <= {JobStatus.CANCELLED.value, JobStatus.EXPIRED.value}


def test_a_full_batch_queue_is_waited_out_and_a_restart_resumes(settings: Settings) -> None:
    tier = TierConfig(max_queue_depth={Priority.INTERACTIVE: 10, Priority.BATCH: 2})
    settings = settings.model_copy(update={"tiers": {**settings.tiers, Tier.SMALL: tier}})
    broker = redis.Redis.from_url(settings.broker_url)
    queue = queue_name(Tier.SMALL, Priority.BATCH)
    waits: list[float] = []

    def drain(seconds: float) -> None:  # a worker taking a message while we wait
        waits.append(seconds)
        broker.rpop(queue)

    with Client(settings) as client:
        batch = _new_batch(client, [line(f"r{i}") for i in range(6)])
        # Stopped after the first chunk, as a gateway shutting down would be.
        progress: list[int] = []
        enqueue_batch(
            client,
            batch.id,
            holder="first",
            chunk=3,
            sleep=drain,
            on_progress=lambda done, _total: progress.append(done),
            stopping=lambda: len(progress) >= 1,
        )
        assert store.get_batch(client.sessions, batch.id, owner="team").enqueued == 3
        assert enqueue_batch(client, batch.id, holder="second", chunk=3, sleep=drain)
        resumed = store.get_batch(client.sessions, batch.id, owner="team")
    broker.close()
    assert waits, "the full queue was never waited on"
    assert resumed.enqueued == 6 and resumed.status == "in_progress"
    jobs = batch_jobs(settings.database_url, batch.id)
    assert sorted(job.custom_id or "" for job in jobs) == [f"r{i}" for i in range(6)]


def test_files_past_their_retention_are_deleted_unless_a_running_batch_reads_them(
    settings: Settings,
) -> None:
    with Client(settings) as client:
        old = _upload(client, [line("a")])
        read = _new_batch(client, [line("b")])  # in progress: its input is kept
        new = _upload(client, [line("c")])
        engine = create_engine(settings.database_url)
        with engine.begin() as conn:
            backdated = utcnow() - timedelta(days=31)
            conn.execute(
                update(BatchFile)
                .where(BatchFile.id.in_([old.id, read.input_file_id]))
                .values(created_at=backdated)
            )
        engine.dispose()
        assert expire_files(client.sessions, retention_days=30) == 1
        with pytest.raises(store.NotFound):
            store.get_file(client.sessions, old.id, owner=None)
        assert store.get_file(client.sessions, read.input_file_id, owner=None)
        assert store.get_file(client.sessions, new.id, owner=None)
        # Its lines went with it: nothing of the old file is left to read.
        with Session(create_engine(settings.database_url)) as session:
            left = session.scalar(
                select(func.count())
                .select_from(BatchFileLine)
                .where(BatchFileLine.file_id == old.id)
            )
        assert left == 0


def _new_batch(client: Client, lines: list[str], *, window: str = "24h") -> Batch:
    """Upload ``lines`` and make them a batch of the owner ``team`` (nothing sent yet)."""
    return store.create_batch(
        client.sessions,
        input_file_id=_upload(client, lines).id,
        endpoint="/v1/chat/completions",
        completion_window=window,
        owner="team",
    )


def _upload(client: Client, lines: list[str]) -> store.BatchFile:
    return store.create_file(
        client.sessions,
        io.BytesIO(jsonl(*lines)),
        filename="r.jsonl",
        purpose="batch",
        owner="team",
        max_line_bytes=1 << 20,
    )


@pytest.fixture
def cli_settings(settings: Settings, monkeypatch: pytest.MonkeyPatch) -> Settings:
    """``settings``, also in the environment an ``llmq`` command reads."""
    monkeypatch.setenv("LLMQ_BROKER_URL", settings.broker_url)
    monkeypatch.setenv("LLMQ_DATABASE_URL", settings.database_url)
    return settings


def test_llmq_batch_resume_sends_what_an_interrupted_submit_left(
    cli_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = cli_settings
    with Client(settings) as client:
        batch = _new_batch(client, [line(f"r{i}") for i in range(5)])

        def interrupt(done: int, _total: int) -> None:
            raise KeyboardInterrupt  # Ctrl-C after the first chunk, as in llmq batch submit

        with pytest.raises(KeyboardInterrupt):
            enqueue_batch(client, batch.id, holder="cli:1", chunk=2, on_progress=interrupt)
        assert store.get_batch(client.sessions, batch.id, owner="team").enqueued == 2

        assert main(["batch", "resume", batch.id, "--owner", "team"]) == 0
        assert store.get_batch(client.sessions, batch.id, owner="team").enqueued == 5
        assert json.loads(capsys.readouterr().out)["id"] == batch.id
        assert main(["batch", "resume", batch.id, "--owner", "team"]) == 0
        assert "no line left to send" in capsys.readouterr().err
    jobs = batch_jobs(settings.database_url, batch.id)
    assert sorted(job.custom_id or "" for job in jobs) == [f"r{i}" for i in range(5)]


def test_llmq_batch_resume_leaves_a_batch_another_process_is_sending(
    cli_settings: Settings, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = cli_settings
    with Client(settings) as client:
        batch = _new_batch(client, [line("r0"), line("r1")])
        assert claim(client.sessions, batch.id, "a-gateway") is not None
        assert main(["batch", "resume", batch.id, "--owner", "team"]) == 1
        assert "another process" in capsys.readouterr().err
        assert store.get_batch(client.sessions, batch.id, owner="team").enqueued == 0
