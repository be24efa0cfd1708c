"""Subscribing to a job's stream at submit: what happens to the subscription when the
job is not a new one, the submit fails, or nobody reads the stream."""

from __future__ import annotations

import asyncio

import pytest
import redis

from producer.aio import AsyncClient
from producer.client import Client
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


def test_a_sync_subscription_made_at_submit_hears_the_first_event_live(
    integration_settings: Settings,
) -> None:
    """Its reader asks Redis nothing before the first event: an event published only
    on the channel (no log entry) right after submit is read, which a subscription
    made after it would miss."""
    broker = redis.Redis.from_url(integration_settings.broker_url)
    with Client(integration_settings) as client:
        handle = client.submit("hi", subscribe=True)
        held = handle.early is not None
        broker.publish(
            event_channel(handle.job_id), TokenEvent(seq=0, text="live").model_dump_json()
        )
        events = handle.events(timeout=5)
        first = next(events)
        events.close()
    assert held
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


def test_an_async_subscription_made_at_submit_hears_the_first_event_live(
    integration_settings: Settings,
) -> None:
    broker = redis.Redis.from_url(integration_settings.broker_url)

    async def scenario() -> tuple[bool, str]:
        async with AsyncClient(integration_settings) as client:
            handle = await client.submit("hi", subscribe=True)
            held = handle.early is not None
            channel = event_channel(handle.job_id)
            broker.publish(channel, TokenEvent(seq=0, text="live").model_dump_json())
            events = handle.events(timeout=5)
            first = await anext(events)
            await events.aclose()
            return held, first.text if isinstance(first, TokenEvent) else ""

    assert asyncio.run(scenario()) == (True, "live")
