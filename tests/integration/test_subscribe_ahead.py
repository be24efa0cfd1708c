"""Subscribing to a job's stream at submit: confirmed before the job's row is written;
what happens to the subscription when the job is not a new one, the submit fails, or
nobody reads the stream."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest
import redis

import producer.client as client_module
from producer import pubsub_pool
from producer.aio import AsyncClient
from producer.client import Client
from producer.enqueue import Enqueuer
from producer.pubsub_pool import PendingSubscription, PubSubPool
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


class RowWatch:
    """Wraps ``producer.client.insert_job``: what Redis held when each row was written."""

    def __init__(self, settings: Settings, monkeypatch: pytest.MonkeyPatch) -> None:
        self.settings = settings
        self.seen: list[tuple[str, bool, int]] = []
        real = client_module.insert_job

        def watched(*args: Any, **kwargs: Any) -> Any:
            broker = redis.Redis.from_url(settings.broker_url)
            # Channels are server-wide: tests running beside this one have theirs.
            channel = event_channel(kwargs["job_id"]).encode()
            subscribed = channel in stream_channels(settings)
            queued = broker.llen("llm.small.interactive")
            self.seen.append((kwargs["job_id"], subscribed, queued))
            return real(*args, **kwargs)

        monkeypatch.setattr(client_module, "insert_job", watched)


def test_a_sync_subscription_is_confirmed_after_the_message_and_before_the_row(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The SUBSCRIBE's round trip overlaps the message's push; only the row, which a
    worker must claim before it publishes anything, waits for the confirmation."""
    settings = integration_settings.model_copy(update={"row_write_delay_ms": 0})
    rows = RowWatch(settings, monkeypatch)
    order: list[str] = []
    real_push, real_confirm = Enqueuer.push, PendingSubscription.confirm

    def push(self: Enqueuer, *args: Any, **kwargs: Any) -> None:
        order.append("push")
        real_push(self, *args, **kwargs)

    def confirm(self: PendingSubscription, *args: Any, **kwargs: Any) -> None:
        order.append("confirm")
        real_confirm(self, *args, **kwargs)

    monkeypatch.setattr(Enqueuer, "push", push)
    monkeypatch.setattr(PendingSubscription, "confirm", confirm)
    with Client(settings) as client:
        handle = client.submit("hi", tier="small", subscribe=True)
        held = handle.early is not None
        handle.close()
    assert order == ["push", "confirm"]
    assert held
    assert rows.seen == [(handle.job_id, True, 1)]


def test_an_async_subscription_is_confirmed_before_the_row(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    # No wait before the row: the confirmation must be waited for, not just likely.
    settings = integration_settings.model_copy(update={"row_write_delay_ms": 0})
    rows = RowWatch(settings, monkeypatch)

    async def scenario() -> tuple[str, bool]:
        async with AsyncClient(settings) as client:
            handle = await client.submit("hi", tier="small", subscribe=True)
            held = handle.early is not None
            await handle.aclose()
            return handle.job_id, held

    job_id, held = asyncio.run(scenario())
    assert held
    assert rows.seen == [(job_id, True, 1)]


def test_an_async_subscription_not_confirmed_in_time_is_not_used(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A Redis that does not confirm within the wait: the job is still written (its
    reader subscribes afresh and reads the log), and nothing stays subscribed."""
    monkeypatch.setattr(pubsub_pool, "CONFIRM_WAIT_S", 0.05)
    real_confirmed = PubSubPool.confirmed

    async def slow(self: PubSubPool, channel: str, timeout: float = 1.0) -> Any:
        await asyncio.sleep(0.3)
        return await real_confirmed(self, channel, timeout)

    monkeypatch.setattr(PubSubPool, "confirmed", slow)

    async def scenario() -> tuple[bool, str, bool]:
        async with AsyncClient(integration_settings) as client:
            handle = await client.submit("hi", tier="small", subscribe=True)
            status = (await client.job(handle.job_id)).status
            held = handle.early is not None
            await handle.aclose()
            channel = event_channel(handle.job_id).encode()
            return held, status, channel in stream_channels(integration_settings)

    assert asyncio.run(scenario()) == (False, "queued", False)
