"""Redis Sentinel failover: producers, readers and the worker transport follow the master.

A private master, replica and three sentinels (bench/sentinel_lab.py); the
master is SIGKILLed and a replica promoted. No worker runs: a test-side publisher
writes a job's stream as a worker would.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from bench.sentinel_lab import SentinelLab, failover_phase, sentinel_lab
from producer.client import Client
from schemas.broker import async_redis_client, redis_client
from schemas.errors import LlmqError
from schemas.events import AnyEvent, FinalEvent, JobOutcome, Timings, TokenEvent, Usage
from schemas.queues import Priority, Tier, queue_name
from schemas.settings import Settings
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.app import make_app
from workers.append_combiner import AppendCombiner
from workers.envelope import read_job_message
from workers.job_runner import run_job
from workers.publisher import StreamPublisher
from workers.received_starts import JobHint
from workers.transport import TolerantSentinelTransport
from workers.worker_runtime import WorkerRuntime

pytestmark = [pytest.mark.integration, pytest.mark.timeout(60)]

QUEUE = queue_name(Tier.SMALL, Priority.INTERACTIVE)
REQUEST = {"messages": [{"role": "user", "content": "where is my order?"}], "max_tokens": 8}


@pytest.fixture
def lab(tmp_path: Path) -> Iterator[SentinelLab]:
    with sentinel_lab(tmp_path / "sentinel") as started:
        yield started


def queued_job_ids(lab: SentinelLab) -> list[str]:
    """Job ids of the messages on the small interactive queue of the current master."""
    client = lab.master.client()
    try:
        return [json.loads(raw)["headers"]["id"] for raw in client.lrange(QUEUE, 0, -1)]
    finally:
        client.close()


class Reader(threading.Thread):
    """Follows a job's stream through the producer client, as a waiting user does."""

    def __init__(self, client: Client, job_id: str) -> None:
        super().__init__(daemon=True)
        self.client = client
        self.job_id = job_id
        self.events: list[AnyEvent] = []
        self.error: Exception | None = None
        self.start()

    def run(self) -> None:
        try:
            self.events.extend(self.client.events(self.job_id, timeout=40))
        except (LlmqError, redis.RedisError) as exc:  # reported by the test
            self.error = exc

    def wait_for(self, count: int, timeout_s: float = 10.0) -> None:
        deadline = time.monotonic() + timeout_s
        while len(self.events) < count and time.monotonic() < deadline:
            time.sleep(0.02)
        assert len(self.events) >= count, f"the reader got {len(self.events)} events"


def test_producers_readers_and_workers_follow_a_promoted_replica(
    lab: SentinelLab, integration_settings: Settings
) -> None:
    settings = integration_settings.model_copy(update={"broker_url": lab.url})
    with Client(settings) as client:
        before = [client.submit(REQUEST, tier=Tier.SMALL).job_id for _ in range(3)]
        assert queued_job_ids(lab) == before[::-1]  # kombu pushes on the left

        streamed = before[0]
        publisher = StreamPublisher(redis_client(lab.url), streamed, ttl_s=60)
        reader = Reader(client, streamed)
        publisher.token("Your order ")
        publisher.token("left ")
        reader.wait_for(2)

        # One event loop for the asyncio client's whole life, as in the gateway.
        loop = asyncio.new_event_loop()
        async_client = async_redis_client(lab.url)
        loop.run_until_complete(async_client.set("llmq:test:async", "before"))

        assert lab.wait_replicated() == 1  # what is acknowledged here must survive
        old_port = lab.kill_master()
        new_port = lab.wait_promoted(old_port)
        assert new_port != old_port

        # The worker's stream goes on on the new master, and the reader follows it.
        publisher.token("today.")
        result = JobOutcome(
            text="Your order left today.",
            finish_reason="stop",
            usage=Usage(prompt_tokens=5, completion_tokens=3),
            timings=Timings(queue_wait_ms=1.0, total_ms=2.0),
        )
        publisher.final(result, worker_id="test-worker")
        reader.join(timeout=30)
        assert reader.error is None, reader.error
        assert [event.seq for event in reader.events] == [0, 1, 2, 3]
        texts = [event.text for event in reader.events if isinstance(event, TokenEvent)]
        assert texts == ["Your order ", "left ", "today."]
        assert isinstance(reader.events[-1], FinalEvent)

        # Submitting goes on, through Celery, to the promoted replica.
        after = client.submit(REQUEST, tier=Tier.SMALL).job_id
        assert queued_job_ids(lab) == [after, *before[::-1]]

        # The asyncio client (gateway, AsyncClient) follows the new master too.
        async def read_and_write() -> bytes | None:
            value = await async_client.get("llmq:test:async")
            await async_client.set("llmq:test:async", "after")
            await async_client.aclose()
            return value

        assert loop.run_until_complete(read_and_write()) == b"before"
        loop.close()

    # A worker's Celery connection goes through the sentinels to the new master and
    # takes the messages there.
    app = make_app(settings)
    with app.connection_for_read() as connection:
        assert isinstance(connection.transport, TolerantSentinelTransport)
        channel = connection.default_channel
        host, port = channel.client.connection_pool.get_master_address()
        assert (host, int(port)) == ("127.0.0.1", new_port)
        message = channel.basic_get(QUEUE, no_ack=True)
        assert message is not None
        assert message.headers["id"] == before[0]  # the oldest message comes first
    app.close()


class ScriptedWorker(threading.Thread):
    """Takes job messages off the queue through the sentinels and runs them on a
    scripted engine, as a worker would (no Celery, no vLLM)."""

    def __init__(self, runtime: WorkerRuntime) -> None:
        super().__init__(daemon=True)
        self.runtime = runtime
        self.stopping = threading.Event()
        self.ran: list[str] = []
        self.start()

    def run(self) -> None:
        while not self.stopping.is_set():
            try:
                popped = self.runtime.redis.brpop([QUEUE], timeout=1)
            except redis.RedisError:
                time.sleep(0.2)  # the master is being replaced
                continue
            if popped:
                # As the Celery task does: the message's copy of its request lets the
                # claim wait for a row written just after the push (schemas.messages).
                message = read_job_message(json.loads(popped[1]))
                hint = JobHint(**message.kwargs) if message.kwargs else None
                run_job(self.runtime, message.job_id, hint)
                self.ran.append(message.job_id)


@dataclasses.dataclass
class FailoverBench:
    settings: Settings
    sentinels: SentinelLab


def test_the_failover_round_loses_no_acknowledged_job(
    lab: SentinelLab, integration_settings: Settings
) -> None:
    # A row written well after its message: the worker must wait for it, not skip the
    # job (what a loaded host does to the default few milliseconds).
    settings = integration_settings.model_copy(
        update={"broker_url": lab.url, "row_write_delay_ms": 100}
    )
    engine = ScriptedEngine(["Once ", "upon ", "a ", "time."], delay_s=0.05)
    lab_redis = redis_client(lab.url)
    runtime = dataclasses.replace(
        runtime_for(integration_settings, engine),
        settings=settings,
        redis=lab_redis,
        appends=AppendCombiner(lab_redis),
    )
    worker = ScriptedWorker(runtime)
    try:
        with Client(settings) as client:
            report = failover_phase(
                FailoverBench(settings, lab), client, jobs=8, max_tokens=8, job_timeout_s=30
            )
    finally:
        worker.stopping.set()
        worker.join(timeout=5)
    figures = report.figures()
    assert figures["failovers"] == 1
    assert report.acknowledged + report.refused == 8
    assert report.acknowledged >= 4  # at least the jobs submitted before the kill
    assert figures["failover_jobs_lost"] == 0
    assert figures["failover_duplicate_results"] == 0
    assert figures["failover_stream_gaps"] == 0
    assert sorted(worker.ran) == sorted(report.job_ids)
