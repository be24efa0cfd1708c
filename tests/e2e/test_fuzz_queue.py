"""A thousand malformed entries on a worker's queue: it drops them all and keeps serving."""

from __future__ import annotations

import os
import time

import pytest
import redis

from bench.fuzz import fuzz_cases
from bench.queue_fuzz import push_raw_payloads
from producer.client import Client
from schemas.jobs import JobStatus
from schemas.queues import Priority, Tier, queue_name, worker_key
from schemas.settings import Settings
from tests.conftest import job_row
from workers.worker import worker_pid

pytestmark = pytest.mark.e2e

CASES = 1000
SEED = 20_240_601
DRAIN_TIMEOUT_S = 120.0


def is_running(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


def wait_until_drained(client: redis.Redis, queue: str, worker_id: str) -> int:
    """Poll until ``queue`` is empty or the worker is gone; return the entries left.

    Gone means its process exited or its registry entry vanished: a worker whose
    consumer died withdraws the entry but its process may linger.
    """
    deadline = time.monotonic() + DRAIN_TIMEOUT_S
    left = int(client.llen(queue))
    while left and time.monotonic() < deadline and is_serving(client, worker_id):
        time.sleep(0.5)
        left = int(client.llen(queue))
    return left


def is_serving(client: redis.Redis, worker_id: str) -> bool:
    return is_running(worker_pid(worker_id)) and bool(client.exists(worker_key(worker_id)))


def test_a_worker_survives_a_thousand_malformed_queue_entries(
    client: Client, e2e_settings: Settings, worker: str
) -> None:
    broker = redis.Redis.from_url(e2e_settings.broker_url)
    queue = queue_name(Tier.SMALL, Priority.INTERACTIVE)
    payloads = fuzz_cases(CASES, seed=SEED).queue_payloads
    assert push_raw_payloads(broker, queue, payloads) == CASES

    left = wait_until_drained(broker, queue, worker)

    alive = is_running(worker_pid(worker))
    heartbeat = bool(broker.exists(worker_key(worker)))
    # kombu's hash of delivered, not yet acknowledged messages: entries stuck there hold
    # the worker's prefetch slots, which is why a live worker can stop draining.
    unacked = broker.hlen("unacked")
    state = f"{left} left on {queue}, {unacked} unacked, heartbeat {heartbeat}"
    assert alive, f"the worker exited ({state})"
    assert left == 0, f"the queue did not drain in {DRAIN_TIMEOUT_S:.0f} s ({state})"
    assert heartbeat, f"the worker stopped its heartbeat ({state})"
    handle = client.submit(
        {"messages": [{"role": "user", "content": "Say hi."}], "max_tokens": 4}, tier="small"
    )
    assert handle.result(timeout=120).text
    assert job_row(e2e_settings.database_url, handle.job_id).status == JobStatus.DONE
    broker.close()
