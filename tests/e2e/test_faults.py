"""Fault injection with real workers on a private Redis: crashes lose and duplicate nothing.

These tests share one lab (its own ``redis-server``, which they crash, and two workers
in their own process groups, which they kill) and its own PostgreSQL database. They
run what ``llmq bench faults`` runs, and assert its counts are zero (the fuzzing part
is in ``test_fuzz_queue.py`` and ``tests/unit/test_fuzz_requests.py``).
"""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import psutil
import pytest
from sqlalchemy import select

from bench.fault_lab import TIER, Lab, fault_lab
from bench.faults import finished_reconnects, kill_loop, poison_job, redis_restart
from producer.batches import results, store
from producer.batches.enqueue import enqueue_batch
from producer.batches.status import BatchStatus
from producer.client import Client
from schemas.jobs import JobStatus
from schemas.settings import Settings
from schemas.tables import Batch, Job
from tests.conftest import postgres_database, truncate_jobs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(3600)]

# One kill of each kind (mid-stream, and on arrival before the claim), to keep the
# test run short; the 20-kill soak is ``llmq bench faults``.
KILLS = 2
# Far below the visibility timeout (the tier's longest job plus a minute), which was
# all that brought back a message its dead worker had not claimed yet.
RECOVERY_BOUND_S = 60.0
# An idle worker looks at its engine every second; a warm shutdown takes a few more.
ENGINE_DEATH_NOTICED_S = 30.0


@pytest.fixture(scope="module")
def lab() -> Iterator[tuple[Lab, Client]]:
    database_url = postgres_database("llmq_faults")
    truncate_jobs(database_url)
    # No request here names a system prompt: the lab's many worker starts skip prefilling.
    with (
        fault_lab(Settings(database_url=database_url), prefill_prompts=False) as lab,
        Client(lab.settings) as client,
    ):
        yield lab, client


def test_workers_killed_mid_generation_lose_and_duplicate_nothing(
    lab: tuple[Lab, Client],
) -> None:
    report = kill_loop(*lab, kills=KILLS, max_tokens=96, seed=1)
    assert report.kills == KILLS
    assert report.jobs_lost == 0
    assert report.duplicate_results == 0
    assert (report.stream_gaps, report.stream_dups, report.incoherent_texts) == (0, 0, 0)
    assert report.stalled_jobs == 0
    # Each job killed mid-stream went on in a second attempt.
    assert report.resumed_attempts >= KILLS // 2
    assert len(report.recovery_s) >= KILLS  # every job a victim held went on...
    assert max(report.recovery_s) < RECOVERY_BOUND_S  # ...without waiting for redelivery
    assert report.reconnects > KILLS  # the listeners dropped and resumed many times


def test_every_acknowledged_job_survives_a_redis_crash(lab: tuple[Lab, Client]) -> None:
    report = redis_restart(*lab, jobs=16, max_tokens=24)
    assert report.restarts == 1
    assert report.acknowledged >= 8
    assert report.jobs_lost == 0
    assert lab[0].alive() == 2


def test_a_job_that_kills_every_worker_it_meets_is_dead_lettered(
    lab: tuple[Lab, Client],
) -> None:
    assert poison_job(*lab, max_tokens=96)


def test_rereading_streams_from_random_points_has_no_gaps_or_duplicates(
    lab: tuple[Lab, Client],
) -> None:
    _, client = lab
    request = {"messages": [{"role": "user", "content": "Name three rivers."}], "max_tokens": 24}
    handles = [client.submit(request, tier="small") for _ in range(3)]
    for handle in handles:
        handle.result(timeout=300)
    gaps, dups = finished_reconnects(client, [h.job_id for h in handles], times=100, seed=5)
    assert (gaps, dups) == (0, 0)


def start_batch(client: Client, *, lines: int, max_tokens: int) -> str:
    """Upload ``lines`` requests as one batch and send them all as batch-priority jobs."""
    body = {"model": TIER.value, "max_tokens": max_tokens, "temperature": 0}
    requests = [
        {
            "custom_id": f"line-{n}",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": body | {"messages": [{"role": "user", "content": f"Tell a story {n}."}]},
        }
        for n in range(lines)
    ]
    data = "\n".join(json.dumps(r) for r in requests).encode()
    batch = store.upload_batch(
        client.sessions,
        io.BytesIO(data),
        filename="kill.jsonl",
        owner="fault-lab",
        max_line_bytes=1 << 16,
        completion_window="1h",
    )
    assert enqueue_batch(client, batch.id, holder="fault-lab")
    return batch.id


def running_worker_of(client: Client, batch_id: str, timeout_s: float) -> str:
    """The worker of the first of the batch's lines seen running."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        with client.sessions() as session:
            worker_id = session.scalar(
                select(Job.worker_id)
                .where(Job.batch_id == batch_id, Job.status == JobStatus.RUNNING.value)
                .limit(1)
            )
        if worker_id:
            return worker_id
        time.sleep(0.05)
    raise AssertionError("no line of the batch started")


def test_a_batch_survives_a_worker_kill(lab: tuple[Lab, Client]) -> None:
    # Last in this module: it leaves the lab one worker (no replacement to warm).
    the_lab, client = lab
    lines = 3 * the_lab.concurrency
    batch_id = start_batch(client, lines=lines, max_tokens=48)
    the_lab.kill(running_worker_of(client, batch_id, timeout_s=120))
    deadline = time.monotonic() + 600
    while not BatchStatus((row := refresh(client, batch_id)).status).is_final:
        assert time.monotonic() < deadline, f"batch still {row.status}"
        time.sleep(0.5)
    assert row.status == BatchStatus.COMPLETED.value
    with client.sessions() as session:
        output = [json.loads(line) for line in results.output_lines(session, row)]
        attempts = session.scalars(select(Job.attempts).where(Job.batch_id == batch_id)).all()
    answered = sorted(line["custom_id"] for line in output)
    assert answered == sorted(f"line-{n}" for n in range(lines))  # each line once
    assert max(attempts) >= 2  # the killed worker's lines ran again elsewhere


def test_a_worker_whose_engine_dies_while_idle_leaves_at_once(lab: tuple[Lab, Client]) -> None:
    # After the batch test: the lab's last worker, idle. Its engine processes are killed,
    # the worker itself is not; it must notice without a job to run and stop, so its
    # supervisor can restart it, instead of staying "warm" and taking messages.
    the_lab, _client = lab
    (process,) = [p for p in the_lab.processes.values() if p.poll() is None]
    engine_processes = psutil.Process(process.pid).children(recursive=True)
    assert engine_processes, "the worker runs its engine in child processes"
    for child in engine_processes:
        child.kill()
    process.wait(timeout=ENGINE_DEATH_NOTICED_S)
    assert process.returncode is not None


def refresh(client: Client, batch_id: str) -> Batch:
    return store.refresh_batch(client.sessions, batch_id, cancel_job=client.cancel)
