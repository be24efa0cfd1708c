"""The whole path on real services: submit → Redis queue → vLLM worker → stream → job row."""

from __future__ import annotations

import json
import threading
import time

import pytest
import redis

from producer.client import Client
from schemas.errors import JobFailed
from schemas.events import TokenEvent
from schemas.jobs import JobStatus
from schemas.queues import event_log_key
from schemas.settings import Settings
from tests.conftest import job_row

pytestmark = pytest.mark.e2e

SHORT = {"max_tokens": 16, "temperature": 0.0}


def ask(text: str, **fields: object) -> dict[str, object]:
    return {"messages": [{"role": "user", "content": text}], **SHORT, **fields}


def test_streamed_tokens_add_up_to_the_final_text_and_the_row_is_complete(
    client: Client, e2e_settings: Settings, worker: str
) -> None:
    handle = client.submit(ask("What is the capital of France?"), tier="small")
    events = list(handle.events(timeout=120))
    tokens = [e for e in events if isinstance(e, TokenEvent)]
    assert [e.seq for e in events] == list(range(len(events)))
    assert len(tokens) >= 2
    result = handle.result()
    assert "".join(t.text for t in tokens) == result.text
    assert result.worker_id == worker
    job = job_row(e2e_settings.database_url, handle.job_id)
    assert job.status == JobStatus.DONE
    assert job.output_text == result.text
    assert job.worker_id == worker
    assert job.prompt_tokens is not None and job.prompt_tokens > 5
    assert job.completion_tokens == result.usage.completion_tokens > 0
    assert job.ttft_ms is not None and job.total_ms is not None
    assert 0 < job.queue_wait_ms <= job.ttft_ms <= job.total_ms  # type: ignore[operator]
    assert job.attempts == 1


def test_two_concurrent_requests_share_the_engine(client: Client) -> None:
    handles = [
        client.submit(ask(f"Count from one to twenty, item {i}.", max_tokens=48), tier="small")
        for i in range(2)
    ]
    arrivals: dict[int, list[float]] = {0: [], 1: []}

    def consume(index: int) -> None:
        for _ in handles[index].stream(timeout=120):
            arrivals[index].append(time.monotonic())

    threads = [threading.Thread(target=consume, args=(i,)) for i in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    first, second = arrivals[0], arrivals[1]
    assert len(first) > 4 and len(second) > 4
    # Both were decoding at once: tokens of each arrive while the other is mid-stream.
    assert any(first[0] < t < first[-1] for t in second)
    assert any(second[0] < t < second[-1] for t in first)


def test_a_subscriber_that_starts_late_still_gets_the_full_text(
    client: Client, e2e_settings: Settings
) -> None:
    handle = client.submit(ask("Write a short poem about the sea.", max_tokens=40), tier="small")
    log = redis.Redis.from_url(e2e_settings.broker_url)
    deadline = time.monotonic() + 120
    while log.llen(event_log_key(handle.job_id)) < 3 and time.monotonic() < deadline:
        time.sleep(0.01)
    assert log.llen(event_log_key(handle.job_id)) >= 3, "the job never started streaming"
    late_text = "".join(handle.stream(timeout=120))
    assert late_text == handle.result().text
    assert late_text


def test_garbage_on_the_queue_does_not_stop_the_worker(
    client: Client, e2e_settings: Settings
) -> None:
    queue = redis.Redis.from_url(e2e_settings.broker_url)
    queue.lpush("llm.small.interactive", b"\x80not json at all")
    pickled = {
        "body": "e30=",
        "content-type": "application/x-python-serialize",
        "content-encoding": "binary",
        "headers": {"task": "llmq.generate", "id": "x"},
        "properties": {
            "delivery_tag": "x",
            "body_encoding": "base64",
            "delivery_info": {"exchange": "", "routing_key": "llm.small.interactive"},
        },
    }
    queue.lpush("llm.small.interactive", json.dumps(pickled))
    queue.lpush("llm.small.interactive", b'{"valid": "json", "but": "not a message"}')
    handle = client.submit(ask("Say hi."), tier="small")
    assert handle.result(timeout=120).text


def test_a_prompt_too_long_for_the_context_fails_with_a_clear_error(client: Client) -> None:
    from producer.enqueue import Enqueuer
    from producer.jobs import insert_job
    from schemas.queues import Priority, Tier
    from schemas.requests import GenerationRequest, RoutingDecision

    # Bypass the producer's estimate so the worker's exact check is what answers.
    request = GenerationRequest.from_text("word " * 5000, max_tokens=8)
    decision = RoutingDecision(tier=Tier.SMALL, requested=Tier.SMALL, reason="test")
    job, _ = insert_job(
        client._sessions,
        request=request,
        decision=decision,
        priority=Priority.INTERACTIVE,
        idempotency_key=None,
    )
    Enqueuer(client.settings, client.redis).enqueue(
        job.id, tier=Tier.SMALL, priority=Priority.INTERACTIVE
    )
    with pytest.raises(JobFailed, match="exceeds the small tier's context window of 4096 tokens"):
        client.handle(job.id).result(timeout=120)
