"""Per-key quotas of the Batch API, deleting files, cancelling a batch's jobs at once,
and result files written once however many refreshes race.

No worker runs here: jobs stay queued, or are set running by hand as a worker would.
"""

from __future__ import annotations

import asyncio
import io
import time
from typing import Any

import httpx
import openai
import pytest
import redis
from sqlalchemy import create_engine, func, select, update
from sqlalchemy.orm import Session

from producer.batches import store
from producer.batches.enqueue import enqueue_batch
from producer.batches.runner import BatchRunner
from producer.client import Client
from schemas.jobs import JobStatus
from schemas.queues import Priority, Tier, cancel_key, event_log_key, queue_name
from schemas.settings import Settings, TierConfig
from schemas.tables import Batch, BatchFile, BatchFileLine, Job, utcnow
from tests.gateway_server import running_gateway
from tests.integration.test_batches import (
    batch_jobs,
    clear_batches,
    finish_jobs,
    jsonl,
    line,
    sdk,
    wait_for,
)
from tests.integration.test_gateway import auth, new_key

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(integration_settings: Settings) -> Settings:
    clear_batches(integration_settings.database_url)
    return integration_settings


def gateway(settings: Settings, **quotas: int) -> Any:
    """A running gateway with ``quotas`` (settings fields) changed."""
    return running_gateway(settings.model_copy(update=quotas))


def upload(client: openai.OpenAI, *lines: str) -> str:
    return client.files.create(file=("r.jsonl", io.BytesIO(jsonl(*lines))), purpose="batch").id


def create(client: openai.OpenAI, file_id: str) -> str:
    return client.batches.create(
        input_file_id=file_id, endpoint="/v1/chat/completions", completion_window="24h"
    ).id


def refused(call: Any) -> httpx.Response:
    """The 429 a quota answers, as the client saw it."""
    with pytest.raises(openai.RateLimitError) as caught:
        call()
    response = caught.value.response
    assert response.status_code == 429
    assert int(response.headers["retry-after"]) > 0
    assert response.json()["error"]["code"] == "quota_exceeded"
    return response


def test_uploads_past_the_file_quotas_are_429s_naming_them(settings: Settings) -> None:
    with gateway(settings, key_max_files=2) as url:
        client = sdk(url, new_key(settings, "owner"))
        upload(client, line("a"))
        upload(client, line("b"))
        answer = refused(lambda: upload(client, line("c")))
        assert "file quota" in answer.json()["error"]["message"]
        assert "limit is 2" in answer.json()["error"]["message"]
        # Another key has quotas of its own.
        upload(sdk(url, new_key(settings, "other")), line("a"))
    size = len(jsonl(line("a")))
    with gateway(settings, key_max_files=100, key_max_stored_bytes=size * 3 + size // 2) as url:
        client = sdk(url, new_key(settings, "bytes"))
        upload(client, line("a"))
        answer = refused(lambda: upload(client, *(line(f"r{i}") for i in range(3))))
        assert "stored bytes quota" in answer.json()["error"]["message"]
    engine = create_engine(settings.database_url)
    with Session(engine) as session:
        kept = session.scalar(select(func.count()).select_from(BatchFileLine))
    engine.dispose()
    assert kept == 4, "a refused upload left lines behind"


def test_batches_past_the_in_flight_quotas_are_429s_naming_them(settings: Settings) -> None:
    with gateway(settings, key_max_batches_in_flight=2, key_max_batch_lines_in_flight=5) as url:
        client = sdk(url, new_key(settings, "owner"))
        one, two = upload(client, line("a")), upload(client, *(line(f"r{i}") for i in range(5)))
        first = create(client, one)
        answer = refused(lambda: create(client, two))
        assert "lines in flight" in answer.json()["error"]["message"]
        create(client, one)
        answer = refused(lambda: create(client, one))
        assert "batches in flight" in answer.json()["error"]["message"]
        # A batch that ended no longer counts.
        wait_for(lambda: len(batch_jobs(settings.database_url, first)) == 1)
        finish_jobs(settings.database_url, first)
        wait_for(lambda: client.batches.retrieve(first).status == "completed")
        create(client, one)


def test_delete_a_file_openai_shape_owner_only_and_409_while_a_batch_reads_it(
    settings: Settings,
) -> None:
    with gateway(settings) as url:
        owner_key = new_key(settings, "owner")
        owner, other = sdk(url, owner_key), sdk(url, new_key(settings, "other"))
        kept, used = upload(owner, line("a"), line("b")), upload(owner, line("c"))
        batch = create(owner, used)
        with pytest.raises(openai.NotFoundError):
            other.files.delete(kept)
        with pytest.raises(openai.NotFoundError):
            other.files.delete("file-nosuch")
        with pytest.raises(openai.ConflictError) as caught:
            owner.files.delete(used)
        assert batch in caught.value.response.json()["error"]["message"]
        answer = httpx.delete(f"{url}/v1/files/{kept}", headers=auth(owner_key))
        assert answer.status_code == 200
        assert answer.json() == {"id": kept, "object": "file", "deleted": True}
        with pytest.raises(openai.NotFoundError):
            owner.files.retrieve(kept)
        with pytest.raises(openai.NotFoundError):
            owner.files.delete(kept)
        owner.batches.cancel(batch)
        wait_for(lambda: owner.batches.retrieve(batch).status == "cancelled")
        assert owner.files.delete(used).deleted
    engine = create_engine(settings.database_url)
    with Session(engine) as session:
        lines = session.scalar(select(func.count()).select_from(BatchFileLine))
        files = session.scalars(select(BatchFile.purpose)).all()
    engine.dispose()
    assert lines == 0
    assert "batch" not in files


def test_cancel_stops_every_job_at_once_not_one_call_a_job(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    singles: list[str] = []
    monkeypatch.setattr(Client, "cancel", lambda _self, job_id: singles.append(job_id))
    with gateway(settings) as url:
        client = sdk(url, new_key(settings, "owner"))
        batch = create(client, upload(client, *(line(f"r{i}") for i in range(6))))
        wait_for(lambda: len(batch_jobs(settings.database_url, batch)) == 6)
        running = sorted(job.id for job in batch_jobs(settings.database_url, batch))[0]
        engine = create_engine(settings.database_url)
        with engine.begin() as conn:
            conn.execute(update(Job).where(Job.id == running).values(status="running"))
        engine.dispose()
        answer = client.batches.cancel(batch)
        assert answer.status == "cancelling"  # one job still runs
    assert singles == []
    jobs = {job.id: job.status for job in batch_jobs(settings.database_url, batch)}
    assert jobs.pop(running) == JobStatus.RUNNING.value
    assert set(jobs.values()) == {JobStatus.CANCELLED.value}
    broker = redis.Redis.from_url(settings.broker_url)
    try:
        assert broker.get(cancel_key(running)) == b"1"
        for job_id in jobs:
            (last,) = broker.lrange(event_log_key(job_id), -1, -1)
            assert b'"cancelled"' in last
    finally:
        broker.close()


def test_racing_refreshes_leave_no_result_file_without_its_batch(
    settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(settings) as client:
        batch = store.upload_batch(
            client.sessions,
            io.BytesIO(jsonl(line("a"), "{bad")),
            filename="r.jsonl",
            owner="team",
            max_line_bytes=1 << 20,
        )
        assert enqueue_batch(client, batch.id, holder="test")
        finish_jobs(settings.database_url, batch.id)
        monkeypatch.setattr(store, "next_status", _racing(client, batch.id))
        ended = _plain_refresh(
            client.sessions, batch.id, cancel_batch_jobs=client.cancel_batch_jobs
        )
    assert ended.status == "completed"
    engine = create_engine(settings.database_url)
    with Session(engine) as session:
        made = set(session.scalars(select(BatchFile.id).where(BatchFile.batch_id == batch.id)))
        row = session.get(Batch, batch.id)
    engine.dispose()
    assert row is not None
    assert made == {row.output_file_id, row.error_file_id}


_plain_refresh = store.refresh_batch
_plain_next_status = store.next_status


def _racing(client: Client, batch_id: str) -> Any:
    """``next_status`` that, the first time, lets another refresh end the batch between
    this refresh's read and its write."""
    raced: list[bool] = []

    def next_status(*args: Any, **kwargs: Any) -> Any:
        new = _plain_next_status(*args, **kwargs)
        if not raced:
            raced.append(True)
            _plain_refresh(client.sessions, batch_id, cancel_batch_jobs=client.cancel_batch_jobs)
        return new

    return next_status


def test_the_api_schema_needs_a_key_and_its_pages_are_not_served(settings: Settings) -> None:
    with running_gateway(settings) as url:
        key = new_key(settings, "owner")
        assert httpx.get(url + "/openapi.json").status_code == 401
        assert httpx.get(url + "/openapi.json", headers=auth(key)).status_code == 200
        assert httpx.get(url + "/docs").status_code == 404
        assert httpx.get(url + "/redoc").status_code == 404


def test_a_second_keys_batch_is_fed_while_the_first_keys_waits_on_a_full_queue(
    settings: Settings,
) -> None:
    tier = TierConfig(max_queue_depth={Priority.INTERACTIVE: 10, Priority.BATCH: 2})
    settings = settings.model_copy(update={"tiers": {**settings.tiers, Tier.SMALL: tier}})
    queue = queue_name(Tier.SMALL, Priority.BATCH)
    broker = redis.Redis.from_url(settings.broker_url)

    def new_batch(client: Client, owner: str, lines: int) -> str:
        made = store.upload_batch(
            client.sessions,
            io.BytesIO(jsonl(*(line(f"{owner}{i}") for i in range(lines)))),
            filename="r.jsonl",
            owner=owner,
            max_line_bytes=1 << 20,
        )
        return made.id

    def jobs_of(owner: str) -> int:
        engine = create_engine(settings.database_url)
        with Session(engine) as session:
            count = session.scalar(select(func.count()).where(Job.owner == owner))
        engine.dispose()
        return int(count or 0)

    async def scenario(client: Client) -> int:
        # One feeder, as a gateway with more keys than feeders has.
        runner = BatchRunner(client, interval_s=0.2, feeders=1, turn_s=0.5)
        new_batch(client, "a", 12)
        runner.start()
        try:
            deadline = time.monotonic() + 20
            while jobs_of("a") < 2:  # the queue is full
                assert time.monotonic() < deadline
                await asyncio.sleep(0.1)
            new_batch(client, "b", 2)
            runner.wake()
            while jobs_of("b") == 0:
                assert time.monotonic() < deadline, "the second key's batch was never fed"
                await asyncio.to_thread(broker.rpop, queue)  # a worker taking a message
                await asyncio.sleep(0.3)
            return jobs_of("a")
        finally:
            await runner.stop()

    try:
        with Client(settings) as client:
            fed_first = asyncio.run(scenario(client))
    finally:
        broker.close()
    assert fed_first < 12, "the second key waited for the first key's whole batch"


def test_a_nul_in_a_file_or_batch_id_is_a_404_not_a_503(settings: Settings) -> None:
    with running_gateway(settings) as url:
        headers = auth(new_key(settings, "owner"))
        for method, path, body in (
            ("GET", "/v1/files/file-%00x", None),
            ("GET", "/v1/files/file-%00x/content", None),
            ("DELETE", "/v1/files/file-%00x", None),
            ("GET", "/v1/batches/batch_%00x", None),
            ("POST", "/v1/batches/batch_%00x/cancel", None),
            ("GET", "/v1/batches?after=batch_%00x", None),
            ("POST", "/v1/batches", {"input_file_id": "file-\x00x"}),
        ):
            answer = httpx.request(method, url + path, json=body, headers=headers)
            assert answer.status_code == 404, (method, path, answer.text)
            assert "no " in answer.json()["error"]["message"]


def test_a_cancel_reaches_jobs_a_dead_gateway_sent_but_never_linked(settings: Settings) -> None:
    with Client(settings) as client:
        source = store.create_file(
            client.sessions,
            io.BytesIO(jsonl(*(line(f"r{i}") for i in range(5)))),
            filename="r.jsonl",
            purpose="batch",
            owner="team",
            max_line_bytes=1 << 20,
        )
        batch = store.create_batch(
            client.sessions,
            input_file_id=source.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            owner="team",
        )
        # A gateway sent three lines of its chunk, then died before linking them.
        sent = [
            client.submit(
                {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2},
                tier="small",
                priority="batch",
                owner="team",
                idempotency_key=store.line_key(batch.id, n),
            ).job_id
            for n in range(3)
        ]
        engine = create_engine(settings.database_url)
        with engine.begin() as conn:
            conn.execute(
                update(Batch)
                .where(Batch.id == batch.id)
                .values(status="in_progress", lease_owner="gone", lease_until=utcnow())
            )
        engine.dispose()
        ended = store.cancel_batch(
            client.sessions, batch.id, owner="team", cancel_batch_jobs=client.cancel_batch_jobs
        )
        statuses = {client.status(job_id) for job_id in sent}
    assert ended.status == "cancelled"
    assert statuses == {JobStatus.CANCELLED}
