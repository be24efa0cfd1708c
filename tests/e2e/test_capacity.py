"""Replicas share a tier's queue (pull, not push); workers expose their numbers."""

from __future__ import annotations

import threading
from collections import Counter

import httpx
import pytest

from producer.client import Client
from schemas.queues import Tier
from schemas.settings import Settings
from tests.e2e.conftest import WORKER_METRICS_PORT
from workers.supervise import start_worker_process, stop_process, wait_until_warm

pytestmark = pytest.mark.e2e


def test_two_workers_of_a_tier_both_take_work(
    client: Client,
    e2e_settings: Settings,
    worker: str,
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    log_path = tmp_path_factory.mktemp("replica") / "worker.log"
    with log_path.open("wb") as log:
        replica = start_worker_process(e2e_settings, Tier.SMALL, concurrency=8, output=log)
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


def test_worker_metrics_expose_slots_latencies_and_outcomes(client: Client, worker: str) -> None:
    client.submit({"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 8}).result(
        timeout=120
    )
    text = httpx.get(f"http://127.0.0.1:{WORKER_METRICS_PORT}/metrics", timeout=10).text
    values = {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith("llmq_")
    }
    assert 0 <= values['llmq_worker_free_slots{tier="small"}'] <= 8
    assert values['llmq_worker_in_flight{tier="small"}'] >= 0
    done = 'llmq_worker_jobs_total{priority="interactive",status="done",tier="small"}'
    assert values[done] >= 1
    assert values['llmq_worker_ttft_seconds_count{priority="interactive",tier="small"}'] >= 1
    assert values['llmq_worker_queue_wait_seconds_sum{priority="interactive",tier="small"}'] > 0
