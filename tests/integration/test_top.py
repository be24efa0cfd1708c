"""llmq top reads queues, workers and the last minute's job rows from real services."""

from __future__ import annotations

import io

import pytest
import redis
from rich.console import Console
from sqlalchemy import update

from producer.client import Client
from producer.top import read_snapshot, run_top
from schemas.db import make_engine, make_sessions
from schemas.db_clock import db_now
from schemas.jobs import JobStatus
from schemas.queues import ROUTING_COUNTS_KEY, Priority, Tier
from schemas.registry import WorkerEntry, write_entry
from schemas.settings import Settings
from schemas.tables import Job

pytestmark = pytest.mark.integration


def test_one_frame_shows_queues_workers_latency_routing_and_errors(
    integration_settings: Settings,
) -> None:
    with Client(integration_settings) as client:
        waiting = client.submit("Where is my order?", tier="small", priority="batch")
        finished = [client.submit(f"question {i}", tier="small") for i in range(4)]
        failed = client.submit("this one fails", tier="medium")
        sessions = client.sessions
        with sessions.begin() as session:
            for i, handle in enumerate(finished):
                session.execute(
                    update(Job)
                    .where(Job.id == handle.job_id)
                    .values(
                        status=JobStatus.DONE.value,
                        ttft_ms=100.0 * (i + 1),
                        queue_wait_ms=10.0 * (i + 1),
                        finished_at=db_now(),
                    )
                )
            session.execute(
                update(Job)
                .where(Job.id == failed.job_id)
                .values(status=JobStatus.DEAD_LETTER.value, finished_at=db_now())
            )
        # The four finished jobs' messages were taken by a "worker".
        r = redis.Redis.from_url(integration_settings.broker_url)
        r.delete("llm.small.interactive", "llm.medium.interactive")
        entry = WorkerEntry(
            worker_id="small-1-abc@host",
            tier=Tier.SMALL,
            concurrency=8,
            warm=True,
            in_flight=3,
            system_prompt_requests=10,
            system_prompt_hits=9,
        )
        write_entry(r, entry, expiry_s=60)
        r.hincrby(ROUTING_COUNTS_KEY, "small:classified", 3)
        r.hincrby(ROUTING_COUNTS_KEY, "large:escalated", 1)

        snapshot = read_snapshot(client.redis, sessions)

    (batch,) = [q for q in snapshot.queues if q.depth]
    assert (batch.tier, batch.priority, batch.depth) == (Tier.SMALL, Priority.BATCH, 1)
    assert batch.oldest_age_s >= 0.0
    assert waiting.job_id
    (worker,) = snapshot.workers
    assert worker.free_slots == 5
    (latency,) = snapshot.latency
    assert (latency.tier, latency.priority, latency.jobs) == (Tier.SMALL, Priority.INTERACTIVE, 4)
    assert latency.ttft_ms is not None
    assert latency.ttft_ms[0] == pytest.approx(250.0)
    assert snapshot.errors == {"dead_letter": 1}
    assert snapshot.routing == {"small:classified": 3, "large:escalated": 1}

    out = io.StringIO()
    db = make_engine(integration_settings.database_url)
    try:
        code = run_top(
            client.redis,
            make_sessions(db),
            once=True,
            console=Console(file=out, width=120, color_system=None),
        )
    finally:
        db.dispose()
    text = out.getvalue()
    assert code == 0
    for expected in ("small-1-abc@host", "warm", "5/8", "9/10", "250 ms", "dead_letter 1"):
        assert expected in text
    assert "small 75%" in text
    assert "large 25%" in text
    assert "no reader" not in text  # the small worker reads the small batch queue


def test_a_queue_with_work_and_no_reader_is_flagged(integration_settings: Settings) -> None:
    r = redis.Redis.from_url(integration_settings.broker_url)
    r.rpush("llm.large.batch", b"x")
    out = io.StringIO()
    db = make_engine(integration_settings.database_url)
    try:
        run_top(
            r,
            make_sessions(db),
            once=True,
            console=Console(file=out, width=120, color_system=None),
        )
    finally:
        db.dispose()
    (large_row,) = [
        line for line in out.getvalue().splitlines() if line.strip().startswith("large")
    ]
    assert "no reader" in large_row
