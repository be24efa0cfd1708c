"""Messages a dead worker held go back at once; overdue queued jobs expire; all tiers.

A worker's Celery app is real here (kombu on real Redis); the "worker" that takes a
message and dies is a channel that fetches without acknowledging, which is what a
killed consumer leaves in Redis.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest

from producer.client import Client
from schemas.errors import JobExpired
from schemas.events import ErrorEvent, FinalEvent
from schemas.jobs import JobStatus
from schemas.queues import KNOWN_WORKERS_KEY, Priority, Tier, held_key, queue_name
from schemas.settings import Settings
from tests.conftest import job_row
from tests.integration.test_recovery import REQUEST, SentJobs, die_mid_stream, reaper_for
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.app import make_app
from workers.job_runner import run_job
from workers.transport import job_ids_in_broker, restore_held

pytestmark = pytest.mark.integration

QUEUE = queue_name(Tier.SMALL, Priority.INTERACTIVE)


@contextmanager
def worker_channel(settings: Settings, worker_id: str, *, dies: bool = False) -> Iterator[Any]:
    """A kombu channel of a worker's app: what it takes is recorded as held by it.

    With ``dies``, leaving the block is a crash: kombu's clean-close requeue never runs.
    """
    app = make_app(settings, worker_id=worker_id)
    with app.connection_for_write() as connection:
        channel = connection.default_channel
        yield channel
        if dies:
            channel.qos.restore_at_shutdown = False


def queued_task_ids(client: Client) -> list[str]:
    entries = client.redis.lrange(QUEUE, 0, -1)
    return [json.loads(entry)["headers"]["id"] for entry in entries]


def test_a_message_taken_and_acknowledged_leaves_no_record(
    integration_settings: Settings,
) -> None:
    with (
        Client(integration_settings) as client,
        worker_channel(integration_settings, "small-1@alive") as channel,
    ):
        handle = client.submit(REQUEST)
        message = channel.basic_get(QUEUE, no_ack=False)
        assert message is not None
        assert client.redis.hlen(held_key("small-1@alive")) == 1
        assert client.redis.sismember(KNOWN_WORKERS_KEY, "small-1@alive")
        message.ack()
        assert client.redis.hlen(held_key("small-1@alive")) == 0
        assert queued_task_ids(client) == []
    assert handle.job_id


def test_records_taken_while_delivering_are_written_when_the_delivery_ends(
    integration_settings: Settings,
) -> None:
    with (
        Client(integration_settings) as client,
        worker_channel(integration_settings, "small-1@deferred") as channel,
    ):
        client.submit(REQUEST)
        with channel.qos.records_after():
            message = channel.basic_get(QUEUE, no_ack=False)
            assert message is not None
            assert client.redis.hlen(held_key("small-1@deferred")) == 0
        assert client.redis.hlen(held_key("small-1@deferred")) == 1
        assert client.redis.hlen("unacked") == 1
        message.ack()
        assert client.redis.hlen(held_key("small-1@deferred")) == 0
        assert client.redis.hlen("unacked") == 0


def test_a_message_acknowledged_before_its_record_is_written_leaves_none(
    integration_settings: Settings,
) -> None:
    with (
        Client(integration_settings) as client,
        worker_channel(integration_settings, "small-1@quick") as channel,
    ):
        client.submit(REQUEST)
        with channel.qos.records_after():
            message = channel.basic_get(QUEUE, no_ack=False)
            assert message is not None
            message.ack()
        assert client.redis.hlen(held_key("small-1@quick")) == 0
        assert client.redis.hlen("unacked") == 0
        assert client.redis.zcard("unacked_index") == 0


def test_a_dead_workers_unclaimed_message_is_requeued_at_once(
    integration_settings: Settings,
) -> None:
    reaper = reaper_for(integration_settings, SentJobs())
    reaper.run_once()  # the first look at an empty Redis re-sends queued jobs: none yet
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        with worker_channel(integration_settings, "small-2@gone", dies=True) as dead:
            assert dead.basic_get(QUEUE, no_ack=False) is not None  # popped, never claimed
        assert queued_task_ids(client) == []
        assert client.status(handle.job_id) is JobStatus.QUEUED

        with worker_channel(integration_settings, "small-3@alive") as alive:
            reaper.restore_held = lambda worker_id: restore_held(alive, worker_id)
            recovered = reaper.run_once()
        assert recovered == 1
        assert queued_task_ids(client) == [handle.job_id]
        assert not client.redis.exists(held_key("small-2@gone"))
        assert not client.redis.sismember(KNOWN_WORKERS_KEY, "small-2@gone")
        assert client.redis.hlen("unacked") == 0


def test_a_live_workers_held_message_stays_held(integration_settings: Settings) -> None:
    with Client(integration_settings) as client:
        client.submit(REQUEST)
        reaper = reaper_for(integration_settings, SentJobs())
        reaper.run_once()
        with worker_channel(integration_settings, "small-4@alive") as holder:
            assert holder.basic_get(QUEUE, no_ack=False) is not None
            client.redis.hset("llmq:worker:small-4@alive", "tier", '"small"')
            reaper.restore_held = lambda worker_id: restore_held(holder, worker_id)
            assert reaper.run_once() == 0
            assert queued_task_ids(client) == []
            assert client.redis.hlen(held_key("small-4@alive")) == 1


def test_restoring_twice_puts_a_message_back_once(integration_settings: Settings) -> None:
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        with worker_channel(integration_settings, "small-5@gone", dies=True) as dead:
            message = dead.basic_get(QUEUE, no_ack=False)
            assert message is not None
            # A second reaper read the tag before the first one deleted the record.
            tag = message.delivery_tag
            assert restore_held(dead, "small-5@gone") == 1
            client.redis.hset(held_key("small-5@gone"), tag, "1")
            assert restore_held(dead, "small-5@gone") == 0
        assert queued_task_ids(client) == [handle.job_id]


def test_a_restored_message_delivered_again_runs_once(integration_settings: Settings) -> None:
    engine = ScriptedEngine(["one", " two"])
    runtime = runtime_for(integration_settings, engine)
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        # The restored copy and a visibility-timeout copy of the same job both arrive.
        run_job(runtime, handle.job_id)
        run_job(runtime, handle.job_id)
        events = list(client.events(handle.job_id, timeout=5))
    assert len(engine.prompts) == 1
    assert sum(isinstance(event, FinalEvent) for event in events) == 1
    assert job_row(integration_settings.database_url, handle.job_id).attempts == 1


def test_a_queued_job_past_its_deadline_expires_without_running(
    integration_settings: Settings,
) -> None:
    engine = ScriptedEngine(["never"])
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST, deadline_s=0.2)
        on_time = client.submit(REQUEST, deadline_s=600)
        reaper = reaper_for(integration_settings, SentJobs())
        time.sleep(1.1)  # the database clock has one-second steps on SQLite
        reaper.run_once()
        assert client.status(handle.job_id) is JobStatus.EXPIRED
        assert client.status(on_time.job_id) is JobStatus.QUEUED
        with pytest.raises(JobExpired, match="expired"):
            handle.result(timeout=5)
        events = list(client.events(handle.job_id, timeout=5))
        run_job(runtime_for(integration_settings, engine), handle.job_id)
    assert isinstance(events[-1], ErrorEvent)
    assert engine.seen == []


def test_a_tier_without_workers_still_has_its_running_jobs_recovered(
    integration_settings: Settings,
) -> None:
    send = SentJobs()
    reaper = reaper_for(integration_settings, send)  # a worker of any tier
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST, tier="large")
        die_mid_stream(integration_settings, handle.job_id, ["x"], "large-1@gone")
        reaper.run_once()
        assert client.status(handle.job_id) is JobStatus.QUEUED
    assert (handle.job_id, Tier.LARGE, Priority.INTERACTIVE) in send.sent


def test_a_message_popped_but_never_recorded_is_found_and_sent_again(
    integration_settings: Settings,
) -> None:
    send = SentJobs()
    reaper = reaper_for(integration_settings, send)
    reaper.run_once()  # the first look at an empty Redis re-sends queued jobs: none yet
    with Client(integration_settings) as client:
        reaper.messages_in_broker = lambda: job_ids_in_broker(client.redis)
        lost = client.submit(REQUEST)
        on_queue = client.submit(REQUEST)
        held = client.submit(REQUEST, priority="batch")
        # A worker popped the first message and died before kombu recorded it...
        client.redis.rpop(QUEUE)
        # ...while another worker holds the batch job's message, unacknowledged.
        with worker_channel(integration_settings, "small-7@alive") as holder:
            assert holder.basic_get(queue_name(Tier.SMALL, Priority.BATCH), no_ack=False)
            client.redis.hset("llmq:worker:small-7@alive", "tier", '"small"')
            assert job_ids_in_broker(client.redis) == {on_queue.job_id, held.job_id}
            client.redis.sadd(KNOWN_WORKERS_KEY, "small-6@gone")  # it had announced itself
            time.sleep(1.1)  # only jobs older than a second are looked at
            assert reaper.run_once() == 1
    assert send.sent == [(lost.job_id, Tier.SMALL, Priority.INTERACTIVE)]
    assert not client.redis.sismember(KNOWN_WORKERS_KEY, "small-6@gone")
