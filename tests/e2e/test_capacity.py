"""Replicas share a tier's queue (pull, not push); workers expose their numbers."""

from __future__ import annotations

import threading
import time
from collections import Counter
from collections.abc import Callable

import httpx
import pytest
import redis
from sqlalchemy import create_engine, func, select

from producer.client import Client
from producer.status import live_workers
from schemas.events import AttemptEvent, TokenEvent
from schemas.jobs import JobStatus
from schemas.queues import Priority, Tier
from schemas.settings import Settings
from schemas.tables import Job
from tests.conftest import job_row
from tests.e2e.conftest import WORKER_METRICS_PORT
from workers.registry import HEARTBEAT_S
from workers.scheduler import slot_shares
from workers.supervise import start_worker_process, stop_process, wait_until_warm

pytestmark = pytest.mark.e2e

NO_PREFILL = {"LLMQ_PREFILL_PROMPTS": "0"}


def test_two_workers_of_a_tier_both_take_work(
    client: Client,
    e2e_settings: Settings,
    worker: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    log_path = tmp_path_factory.mktemp("replica") / "worker.log"
    with log_path.open("wb") as log:
        # No request here names a system prompt: the replica starts without prefilling.
        replica = start_worker_process(
            e2e_settings, Tier.SMALL, concurrency=8, output=log, env=NO_PREFILL
        )
    try:
        replica_id = wait_until_warm(e2e_settings, Tier.SMALL, replica, timeout=600)
        request = {"messages": [{"role": "user", "content": "Name a colour."}], "max_tokens": 24}
        handles = [client.submit(request, tier="small") for _ in range(16)]
        served: Counter[str] = Counter()
        lock = threading.Lock()

        def wait(index: int) -> None:
            result = handles[index].result(timeout=300)
            with lock:
                served[str(result.worker_id)] += 1

        threads = [threading.Thread(target=wait, args=(i,)) for i in range(len(handles))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        assert set(served) == {worker, replica_id}
        assert min(served.values()) >= 4, served  # roughly even, not all on one
    finally:
        stop_process(replica)


def worker_metrics() -> dict[str, float]:
    text = httpx.get(f"http://127.0.0.1:{WORKER_METRICS_PORT}/metrics", timeout=10).text
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("llmq_")
    }


def test_worker_metrics_expose_slots_latencies_and_outcomes(client: Client, worker: str) -> None:
    handle = client.submit({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 48})
    next(handle.events(timeout=120))  # running now
    during = worker_metrics()
    handle.result(timeout=120)
    in_flight = during['llmq_worker_in_flight{tier="small"}']
    assert in_flight >= 1
    assert during['llmq_worker_free_slots{tier="small"}'] == 8 - in_flight
    values = worker_metrics()
    done = 'llmq_worker_jobs_total{priority="interactive",status="done",tier="small"}'
    assert values[done] >= 1
    assert values['llmq_worker_ttft_seconds_count{priority="interactive",tier="small"}'] >= 1
    assert values['llmq_worker_queue_wait_seconds_sum{priority="interactive",tier="small"}'] > 0


def test_an_interactive_job_starts_at_once_behind_a_batch_backlog(
    client: Client, e2e_settings: Settings, worker: str
) -> None:
    shares = slot_shares(e2e_settings.tier(Tier.SMALL), 8)  # the session worker's slots
    request = {"messages": [{"role": "user", "content": "Summarise: parcel late."}]}
    backlog = [
        client.submit({**request, "max_tokens": 24}, tier="small", priority="batch")
        for _ in range(40)
    ]
    try:
        wait_for(lambda: running_batch(e2e_settings) >= shares.batch_max)
        urgent = client.submit({**request, "max_tokens": 4}, tier="small")
        assert urgent.result(timeout=120).text
        # It went straight into a reserved slot: no wait for a batch job to end (each
        # takes seconds here), only the hop from the queue to the worker.
        urgent_wait = job_row(e2e_settings.database_url, urgent.job_id).queue_wait_ms
        assert urgent_wait is not None and urgent_wait < 1000
        waiting = [h for h in backlog if client.status(h.job_id) is JobStatus.QUEUED]
        assert waiting, "the interactive job waited for the whole backlog"
    finally:
        for handle in backlog:
            handle.cancel()
    wait_for(lambda: running_batch(e2e_settings) == 0)
    assert most_at_once(e2e_settings, [h.job_id for h in backlog]) <= shares.batch_max


def test_a_batch_job_that_gives_way_goes_on_from_what_it_had_generated(
    client: Client, e2e_settings: Settings, worker: str
) -> None:
    shares = slot_shares(e2e_settings.tier(Tier.SMALL), 8)  # the session worker's slots
    story = {"role": "user", "content": "Tell a long story about a lighthouse keeper."}
    backlog = [
        client.submit({"messages": [story], "max_tokens": 96}, tier="small", priority="batch")
        for _ in range(shares.batch_max)
    ]
    try:
        wait_for(lambda: running_batch(e2e_settings) >= shares.batch_max)
        time.sleep(1.0)  # every batch answer some tokens in, held in the engine
        question = {"role": "user", "content": "Are you open today?"}
        # The first person takes the reserved slot; the second, read on the thread
        # beyond the slots while every slot is taken, makes the youngest batch job
        # give way.
        first = client.submit({"messages": [question], "max_tokens": 48}, tier="small")
        urgent = client.submit({"messages": [question], "max_tokens": 4}, tier="small")
        assert urgent.result(timeout=120).text and first.result(timeout=120).text
        texts = {h.job_id: h.result(timeout=300).text for h in backlog}
    finally:
        for handle in backlog:
            handle.cancel()
    went_on = []
    for job_id, text in texts.items():
        events = list(client.events(job_id, timeout=10))
        attempts = [e for e in events if isinstance(e, AttemptEvent)]
        if not attempts:
            continue
        # What the engine held when the job gave way was published first; the next
        # run took it over (the same attempt) and the answer goes on from it.
        kept = "".join(
            e.text for e in events if isinstance(e, TokenEvent) and e.seq < attempts[0].seq
        )
        assert kept and attempts[0].attempt == 1
        assert attempts[0].resumed_chars == len(kept)
        assert text.startswith(kept) and len(text) > len(kept)
        assert job_row(e2e_settings.database_url, job_id).attempts == 1
        went_on.append(job_id)
    assert went_on, "no batch job gave way to the interactive request"


def test_batch_keeps_working_beside_people_under_the_slo_share(
    client: Client, e2e_settings: Settings, worker: str
) -> None:
    request = {"messages": [{"role": "user", "content": "Summarise: parcel late."}]}
    backlog = [
        client.submit({**request, "max_tokens": 24}, tier="small", priority="batch")
        for _ in range(12)
    ]
    try:
        wait_for(lambda: running_batch(e2e_settings) >= 1)
        for _ in range(3):
            urgent = client.submit({**request, "max_tokens": 4}, tier="small")
            assert urgent.result(timeout=120).text
        # Interactive work ran just now (and its hold lasts 5 s): a batch share that
        # paused for people would leave no batch job running within these 2 s.
        wait_for(lambda: running_batch(e2e_settings) >= 1, timeout_s=2)
        time.sleep(2 * HEARTBEAT_S)  # the registry's next write
        (entry,) = [
            w
            for w in live_workers(redis.Redis.from_url(e2e_settings.broker_url))
            if w.worker_id == worker
        ]
        slo_ms = e2e_settings.tier(Tier.SMALL).interactive_ttft_slo_ms
        assert entry.interactive_ttft_slo_ms == slo_ms
        assert entry.batch_under_interactive is not None and entry.batch_under_interactive >= 1
    finally:
        for handle in backlog:
            handle.cancel()
    wait_for(lambda: running_batch(e2e_settings) == 0)


def wait_for(condition: Callable[[], bool], timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def running_batch(settings: Settings) -> int:
    engine = create_engine(settings.database_url)
    with engine.connect() as conn:
        count = conn.scalar(
            select(func.count()).where(
                Job.priority == Priority.BATCH.value, Job.status == JobStatus.RUNNING.value
            )
        )
    engine.dispose()
    return int(count or 0)


def most_at_once(settings: Settings, job_ids: list[str]) -> int:
    """The most of these jobs that ran at the same moment, from their rows' times.

    A job that gave way and was cancelled back in its queue is left out: giving way
    hands its attempt back (0 attempts) and leaves the row's start as it was, so its
    start and end would span the time it waited in the queue.
    """
    rows = [job_row(settings.database_url, job_id) for job_id in job_ids]
    rows = [row for row in rows if row.attempts > 0]
    edges = sorted(
        [(row.started_at, 1) for row in rows if row.started_at and row.finished_at]
        + [(row.finished_at, -1) for row in rows if row.started_at and row.finished_at]
    )
    most = current = 0
    for _, step in edges:
        current += step
        most = max(most, current)
    return most
