"""A worker takes work only once warm, with registered system prompts already cached."""

from __future__ import annotations

import time

import pytest
import redis

from producer.client import Client
from schemas.jobs import JobStatus
from schemas.queues import Tier, worker_key
from schemas.settings import Settings
from tests.conftest import job_row
from workers.supervise import start_worker_process, stop_process, wait_until_warm

pytestmark = pytest.mark.e2e


def test_a_registered_2k_prompt_is_a_cache_hit_on_first_use(
    client: Client, e2e_settings: Settings, worker: str
) -> None:
    request = {
        "messages": [{"role": "user", "content": "Can I return worn boots?"}],
        "system_prompt": "support",
        "max_tokens": 4,
        "temperature": 0.0,
    }
    result = client.submit(request, tier="small").result(timeout=120)
    assert result.usage.prompt_tokens > 2000
    # The engine's own count: nearly the whole system prompt came from the prefix cache.
    assert result.usage.cached_prompt_tokens >= 0.9 * 2000
    job = job_row(e2e_settings.database_url, result.job_id)
    assert job.cached_prompt_tokens == result.usage.cached_prompt_tokens
    assert job.engine_warm is True
    entry = redis.Redis.from_url(e2e_settings.broker_url)
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        if int(entry.hget(worker_key(worker), "system_prompt_hits") or 0) >= 1:
            break
        time.sleep(0.5)
    assert int(entry.hget(worker_key(worker), "system_prompt_hits") or 0) >= 1


def test_a_worker_takes_no_job_before_it_is_warm(
    client: Client, e2e_settings: Settings, tmp_path_factory: pytest.TempPathFactory
) -> None:
    # Enqueue first, on a tier no worker serves yet; then start that tier's worker.
    handle = client.submit(
        {"messages": [{"role": "user", "content": "Hi!"}], "max_tokens": 4}, tier="medium"
    )
    log_path = tmp_path_factory.mktemp("medium") / "worker.log"
    with log_path.open("wb") as log:
        # Loading and warming the engine is warming enough to test: no prompt prefills.
        process = start_worker_process(
            e2e_settings,
            Tier.MEDIUM,
            concurrency=2,
            output=log,
            env={"LLMQ_PREFILL_PROMPTS": "0"},
        )
    registry = redis.Redis.from_url(e2e_settings.broker_url)
    try:
        seen_warming = False
        deadline = time.monotonic() + 300
        while time.monotonic() < deadline and not seen_warming:
            for key in registry.scan_iter(match=f"llmq:worker:medium-{process.pid}-*@*"):
                if registry.hget(key, "warm") == b"0":
                    seen_warming = True
                    # Loading and warming: the job must still be waiting.
                    assert client.status(handle.job_id) is JobStatus.QUEUED
            time.sleep(0.2)
        assert seen_warming, "the worker never reported itself as warming"
        worker_id = wait_until_warm(e2e_settings, Tier.MEDIUM, process, timeout=600)
        warm_at = float(registry.hget(worker_key(worker_id), "warm_at") or 0)
        result = handle.result(timeout=120)
        assert result.worker_id == worker_id
        started = job_row(e2e_settings.database_url, handle.job_id).started_at
        assert started is not None
        assert started.timestamp() >= warm_at
    finally:
        stop_process(process)


def test_a_follow_up_turn_reuses_the_cached_conversation(client: Client) -> None:
    first_turn = [{"role": "user", "content": "Hello, I have a question about a recent order."}]
    request = {"system_prompt": "support@1", "max_tokens": 24, "temperature": 0.0}
    first = client.submit({**request, "messages": first_turn}, tier="small").result(timeout=120)
    follow_up = [
        *first_turn,
        {"role": "assistant", "content": first.text},
        {"role": "user", "content": "Can I still change the shipping address?"},
    ]
    second = client.submit({**request, "messages": follow_up}, tier="small").result(timeout=120)
    # Everything the first turn sent (whole 32-token blocks of it) came from the cache.
    assert second.usage.cached_prompt_tokens >= first.usage.prompt_tokens - 32
    assert second.usage.cached_prompt_tokens > first.usage.cached_prompt_tokens
