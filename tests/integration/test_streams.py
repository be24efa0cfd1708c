"""Stream events on real Redis: the one append path, and both readers over it."""

from __future__ import annotations

import asyncio
import threading
import time

import redis
import redis.asyncio as aioredis

from producer.pubsub_pool import PubSubPool, SyncPubSubPool, own_message
from producer.streams import Event, aread_events, close_stream, read_events
from schemas.events import ErrorEvent, TokenEvent
from schemas.queues import event_channel, event_log_key
from schemas.settings import Settings
from schemas.stream_log import EventLog
from workers.publisher import StreamPublisher


def texts(events: list[Event]) -> list[str]:
    return [e.text if isinstance(e, TokenEvent) else f"<{e.type}>" for e in events]


def test_an_event_is_appended_only_at_its_own_number(integration_settings: Settings) -> None:
    client = redis.Redis.from_url(integration_settings.broker_url)
    log = EventLog(client, "j1", ttl_s=60)
    first = TokenEvent(seq=0, text="a").model_dump_json()
    with client.pubsub() as pubsub:  # type: ignore[no-untyped-call]
        pubsub.subscribe(event_channel("j1"))
        assert pubsub.get_message(timeout=1)["type"] == "subscribe"
        assert log.append(0, first) is None
        assert pubsub.get_message(timeout=1)["data"] == first.encode()
    # A retried append, or one ahead of the log, writes nothing and says how long it is.
    assert log.append(0, first) == 1
    assert log.append(5, first) == 1
    assert log.entries() == [first]
    assert 0 < client.ttl(event_log_key("j1")) <= 60


def test_closing_a_stream_appends_its_error_after_what_is_there(
    integration_settings: Settings,
) -> None:
    client = redis.Redis.from_url(integration_settings.broker_url)
    publisher = StreamPublisher(client, "j2", ttl_s=60)
    publisher.token("a")
    publisher.token("b")
    close_stream(client, "j2", "cancelled by its client", ttl_s=60)
    events = list(read_events(client, "j2", timeout=5))
    assert texts(events) == ["a", "b", "<error>"]
    assert isinstance(events[-1], ErrorEvent)
    assert events[-1].seq == 2
    assert events[-1].message == "cancelled by its client"


def test_append_next_builds_the_event_again_when_another_writer_went_first(
    integration_settings: Settings,
) -> None:
    client = redis.Redis.from_url(integration_settings.broker_url)
    log = EventLog(client, "j3", ttl_s=60)
    numbers: list[int] = []

    def make(seq: int) -> ErrorEvent:
        numbers.append(seq)
        if len(numbers) == 1:  # another writer appends between the length and the append
            log.append(0, TokenEvent(seq=0, text="x").model_dump_json())
        return ErrorEvent(seq=seq, message="closed")

    assert log.append_next(make).seq == 1
    assert numbers == [0, 1]
    assert [e.seq for e in read_events(client, "j3", timeout=5)] == [0, 1]


def test_a_publisher_restores_a_log_that_was_lost(integration_settings: Settings) -> None:
    client = redis.Redis.from_url(integration_settings.broker_url)
    publisher = StreamPublisher(client, "j4", ttl_s=60)
    publisher.token("a")
    publisher.token("b")
    client.delete(event_log_key("j4"))
    publisher.error("boom")
    assert texts(list(read_events(client, "j4", timeout=5))) == ["a", "b", "<error>"]


def publish_slowly(client: redis.Redis, job_id: str, words: list[str]) -> threading.Thread:
    def run() -> None:
        publisher = StreamPublisher(client, job_id, ttl_s=60)
        for word in words:
            time.sleep(0.05)
            publisher.token(word)
        publisher.error("end")

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_sync_and_async_readers_see_the_same_live_stream(integration_settings: Settings) -> None:
    url = integration_settings.broker_url
    client = redis.Redis.from_url(url)
    words = [f"w{i}" for i in range(12)]
    expected = [*words, "<error>"]

    writer = publish_slowly(client, "j5", words)
    assert texts(list(read_events(client, "j5", timeout=10))) == expected
    writer.join()

    async def read_async(job_id: str, from_seq: int) -> list[Event]:
        aclient = aioredis.Redis.from_url(url)
        try:
            return [e async for e in aread_events(aclient, job_id, from_seq=from_seq, timeout=10)]
        finally:
            await aclient.aclose()

    writer = publish_slowly(client, "j6", words)
    assert texts(asyncio.run(read_async("j6", 0))) == expected
    writer.join()
    # Replay from the middle of a finished stream, both ways.
    from_five = list(read_events(client, "j6", from_seq=5, timeout=5))
    assert [e.seq for e in from_five] == list(range(5, 13))
    assert [e.seq for e in asyncio.run(read_async("j6", 5))] == list(range(5, 13))


def test_streams_read_through_a_pool_share_one_connection_and_only_their_own_events(
    integration_settings: Settings,
) -> None:
    url = integration_settings.broker_url
    client = redis.Redis.from_url(url)
    words = [f"w{i}" for i in range(5)]

    async def read_three() -> tuple[list[list[str]], list[list[str]], int]:
        aclient = aioredis.Redis.from_url(url)
        pool = PubSubPool(aclient)
        read: list[list[str]] = []
        connections: list[list[str]] = []
        try:
            for job_id in ("p1", "p2", "p3"):
                writer = publish_slowly(client, job_id, words)
                read.append(
                    texts(
                        [
                            e
                            async for e in aread_events(
                                aclient, job_id, timeout=10, subscriptions=pool
                            )
                        ]
                    )
                )
                await asyncio.to_thread(writer.join)
                # Late news on the stream that just ended: no later stream may take it.
                client.publish(
                    event_channel(job_id), TokenEvent(seq=5, text="late").model_dump_json()
                )
                connections.append(await _pubsub_connections(client))
            return read, connections, pool.idle
        finally:
            await pool.aclose()
            await aclient.aclose()

    read, connections, idle = asyncio.run(read_three())
    assert read == [[*words, "<error>"]] * 3
    assert len(connections[0]) == 1
    assert connections == [connections[0]] * 3  # the one connection, reused
    assert idle == 1


def test_a_stream_given_up_mid_way_does_not_leave_its_connection_in_the_pool(
    integration_settings: Settings,
) -> None:
    url = integration_settings.broker_url
    client = redis.Redis.from_url(url)

    async def read_one_then_stop() -> tuple[str, int]:
        aclient = aioredis.Redis.from_url(url)
        pool = PubSubPool(aclient)
        writer = publish_slowly(client, "p4", ["a", "b", "c"])
        try:
            events = aread_events(aclient, "p4", timeout=10, subscriptions=pool)
            first = await anext(events)
            await events.aclose()  # its reader went away
            return texts([first])[0], pool.idle
        finally:
            await asyncio.to_thread(writer.join)
            await pool.aclose()
            await aclient.aclose()

    assert asyncio.run(read_one_then_stop()) == ("a", 0)


async def _pubsub_connections(client: redis.Redis) -> list[str]:
    """The ids of the connections to this test's database that ever (un)subscribed."""
    db = str(client.connection_pool.connection_kwargs.get("db", 0))
    clients = await asyncio.to_thread(client.client_list)
    return [str(c["id"]) for c in clients if str(c["db"]) == db and "subscribe" in c.get("cmd", "")]


def test_a_reused_connection_hands_its_next_stream_nothing_of_the_last_one(
    integration_settings: Settings,
) -> None:
    url = integration_settings.broker_url
    client = redis.Redis.from_url(url)

    async def two_streams() -> list[tuple[str, str]]:
        aclient = aioredis.Redis.from_url(url)
        pool = PubSubPool(aclient)
        seen: list[tuple[str, str]] = []
        try:
            async with pool.subscribed("old") as pubsub:
                assert (await own_message(pubsub, "old", 1))["type"] == "subscribe"
                client.publish("old", "unread")  # still on the connection when it goes back
                await asyncio.sleep(0.05)
            async with pool.subscribed("new") as pubsub:
                client.publish("new", "mine")
                for _ in range(2):
                    message = await own_message(pubsub, "new", 1)
                    seen.append((message["type"], str(message["channel"], "utf-8")))
            return seen
        finally:
            await pool.aclose()
            await aclient.aclose()

    assert asyncio.run(two_streams()) == [("subscribe", "new"), ("message", "new")]


def test_sync_streams_read_through_a_pool_share_one_connection(
    integration_settings: Settings,
) -> None:
    client = redis.Redis.from_url(integration_settings.broker_url)
    pool = SyncPubSubPool(client)
    words = ["a", "b", "c"]
    read: list[list[str]] = []
    connections: list[list[str]] = []
    try:
        for job_id in ("s1", "s2", "s3"):
            writer = publish_slowly(client, job_id, words)
            read.append(texts(list(read_events(client, job_id, timeout=10, subscriptions=pool))))
            writer.join()
            connections.append(asyncio.run(_pubsub_connections(client)))
        stopped = read_events(client, "s4", timeout=10, subscriptions=pool)
        writer = publish_slowly(client, "s4", words)
        assert texts([next(stopped)]) == ["a"]
        kept = pool.idle
        stopped.close()  # its reader went away mid-way: that connection is not kept
        writer.join()
        kept_after_stop = pool.idle
    finally:
        pool.close()
    assert read == [[*words, "<error>"]] * 3
    assert len(connections[0]) == 1
    assert connections == [connections[0]] * 3
    assert (kept, kept_after_stop) == (0, 0)


def test_one_client_holds_more_streams_than_redis_py_s_default_pool(
    integration_settings: Settings,
) -> None:
    """A gateway holds a subscription per open stream: 150 at once must not fail."""
    from schemas.broker import async_redis_client

    async def hold_many() -> int:
        client = async_redis_client(integration_settings.broker_url)
        subscriptions = []
        try:
            for index in range(150):
                pubsub = client.pubsub()
                await pubsub.subscribe(f"llmq:test:many:{index}")
                subscriptions.append(pubsub)
            return len(subscriptions)
        finally:
            for pubsub in subscriptions:
                await pubsub.aclose()
            await client.aclose()

    assert asyncio.run(hold_many()) == 150
