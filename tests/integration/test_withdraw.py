"""Taking many jobs' messages back off a queue, on real Redis."""

from __future__ import annotations

import pytest
import redis

from producer import enqueue
from producer.enqueue import withdraw_jobs
from schemas.messages import celery_job_message
from schemas.queues import Priority, Tier, queue_name
from schemas.settings import Settings

pytestmark = pytest.mark.integration

QUEUE = queue_name(Tier.SMALL, Priority.BATCH)


def push_jobs(client: redis.Redis, job_ids: list[str]) -> None:
    for job_id in job_ids:
        client.lpush(QUEUE, celery_job_message(job_id, Tier.SMALL, Priority.BATCH).text)


def ids_on_queue(client: redis.Redis) -> list[str | None]:
    return [enqueue._message_job_id(raw) for raw in client.lrange(QUEUE, 0, -1)]


@pytest.fixture
def broker(integration_settings: Settings) -> redis.Redis:
    return redis.Redis.from_url(integration_settings.broker_url)


def test_only_the_named_jobs_leave_the_queue(broker: redis.Redis) -> None:
    push_jobs(broker, ["a", "b", "c"])
    broker.lpush(QUEUE, b"not a message")

    assert withdraw_jobs(broker, QUEUE, ["a", "c", "never-sent"]) == 2

    assert ids_on_queue(broker) == [None, "b"]
    assert withdraw_jobs(broker, QUEUE, ["a", "c"]) == 0


def test_a_queue_longer_than_one_read_is_read_to_its_end(
    broker: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(enqueue, "WITHDRAW_SCAN_CHUNK", 2)
    job_ids = [f"job-{i}" for i in range(7)]
    push_jobs(broker, job_ids)

    assert withdraw_jobs(broker, QUEUE, job_ids[:-1]) == 6

    assert ids_on_queue(broker) == ["job-6"]
