"""Subscribing to a job's stream at submit: what happens to the subscription when the
job is not a new one, the submit fails, or nobody reads the stream."""

from __future__ import annotations

import asyncio
import time

import pytest
import redis

from producer.aio import AsyncClient
from producer.client import Client
from producer.stream_protocol import Joined
from schemas.errors import InvalidRequest
from schemas.events import TokenEvent
from schemas.queues import event_channel
from schemas.settings import Settings

pytestmark = pytest.mark.integration


def stream_channels(settings: Settings) -> list[bytes]:
    """The job stream channels someone is subscribed to now."""
    broker = redis.Redis.from_url(settings.broker_url)
    return list(broker.pubsub_channels("llmq:job:*:events"))


def test_a_replayed_idempotency_key_gives_its_subscription_back(
    integration_settings: Settings,
) -> None:
    async def scenario() -> tuple[bool, list[bytes], list[bytes]]:
        async with AsyncClient(integration_settings) as client:
            first = await client.submit("hi", idempotency_key="k1", subscribe=True)
            again = await client.submit("hi", idempotency_key="k1", subscribe=True)
            while_held = stream_channels(integration_settings)
            await first.aclose()
            after = stream_channels(integration_settings)
            return first.job_id == again.job_id, while_held, after

    same, while_held, after = asyncio.run(scenario())
    assert same
    assert len(while_held) == 1  # the first submit's; the replay's went back
    assert after == []


def test_a_refused_submit_leaves_no_subscription(integration_settings: Settings) -> None:
    async def scenario() -> list[bytes]:
        async with AsyncClient(integration_settings) as client:
            with pytest.raises(InvalidRequest):
                await client.submit({"messages": []}, subscribe=True)
            return stream_channels(integration_settings)

    assert asyncio.run(scenario()) == []


def test_a_stream_never_read_is_unsubscribed_when_its_handle_is_closed(
    integration_settings: Settings,
) -> None:
    async def scenario() -> tuple[int, list[bytes]]:
        async with AsyncClient(integration_settings) as client:
            handle = await client.submit("hi", subscribe=True)
            held = len(stream_channels(integration_settings))
            events = handle.events(timeout=1)  # created, never iterated
            await handle.aclose()
            del events
            return held, stream_channels(integration_settings)

    assert asyncio.run(scenario()) == (1, [])


def test_a_job_id_not_made_by_new_job_id_is_refused(integration_settings: Settings) -> None:
    with Client(integration_settings) as client, pytest.raises(InvalidRequest):
        client.submit("hi", job_id="another-tenants-job")


def test_a_job_id_already_taken_is_refused_and_the_first_job_is_untouched(
    integration_settings: Settings,
) -> None:
    with Client(integration_settings) as client:
        first = client.submit("first", owner="tenant-a")
        with pytest.raises(InvalidRequest, match="taken"):
            client.submit("second", owner="tenant-b", job_id=first.job_id)
        row = client.job(first.job_id)
    assert (row.owner, row.request["messages"][0]["content"]) == ("tenant-a", "first")


def test_a_sync_subscription_is_confirmed_before_the_job_is_sent_and_hears_it_live(
    integration_settings: Settings,
) -> None:
    """Its reader asks Redis nothing before the first event: an event published only
    on the channel (no log entry) is still read."""
    broker = redis.Redis.from_url(integration_settings.broker_url)
    with Client(integration_settings) as client:
        # Redis's answer is in long before a slow row is written.
        handle = client.submit("hi", subscribe=True, before_enqueue=lambda: time.sleep(0.05))
        assert handle.early is not None
        assert handle.early.joined is Joined.BEFORE_JOB
        broker.publish(
            event_channel(handle.job_id), TokenEvent(seq=0, text="live").model_dump_json()
        )
        events = handle.events(timeout=5)
        first = next(events)
        events.close()
    assert isinstance(first, TokenEvent)
    assert first.text == "live"


def test_sync_subscriptions_go_back_on_a_replay_a_refusal_and_a_close(
    integration_settings: Settings,
) -> None:
    with Client(integration_settings) as client:
        first = client.submit("hi", idempotency_key="k2", subscribe=True)
        again = client.submit("hi", idempotency_key="k2", subscribe=True)
        held = stream_channels(integration_settings)
        with pytest.raises(InvalidRequest):
            client.submit({"messages": []}, subscribe=True)
        after_refusal = stream_channels(integration_settings)
        first.close()
        after_close = stream_channels(integration_settings)
    assert (first.job_id == again.job_id, again.early) == (True, None)
    assert len(held) == 1
    assert after_refusal == held
    assert after_close == []


def test_an_async_subscription_is_confirmed_by_the_time_submit_returns_and_hears_it_live(
    integration_settings: Settings,
) -> None:
    broker = redis.Redis.from_url(integration_settings.broker_url)

    async def scenario() -> tuple[Joined | None, str]:
        async with AsyncClient(integration_settings) as client:
            handle = await client.submit("hi", subscribe=True)
            joined = None if handle.early is None else handle.early.joined
            channel = event_channel(handle.job_id)
            broker.publish(channel, TokenEvent(seq=0, text="live").model_dump_json())
            events = handle.events(timeout=5)
            first = await anext(events)
            await events.aclose()
            return joined, first.text if isinstance(first, TokenEvent) else ""

    joined, text = asyncio.run(scenario())
    # Before the job's message, unless the event loop read the answer only after it.
    assert joined in (Joined.BEFORE_JOB, Joined.CONFIRMED)
    assert text == "live"
