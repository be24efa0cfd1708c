"""Broker URLs: plain Redis passes through; Sentinel URLs work for llmq and for Celery."""

from __future__ import annotations

import pytest
import redis
import redis.asyncio as aioredis
import redis.asyncio.sentinel as aiosentinel
import redis.sentinel
from kombu import Connection

from bench.sentinel_lab import count_gaps
from schemas.broker import (
    DEFAULT_MASTER_NAME,
    AsyncFollowingConnection,
    FollowingConnection,
    SentinelBroker,
    async_redis_client,
    celery_broker_url,
    is_sentinel_url,
    parse_sentinel_url,
    redis_client,
    sentinel_transport_options,
)
from schemas.queues import celery_config
from workers.transport import (
    SENTINEL_TRANSPORT_PATH,
    TRANSPORT_PATH,
    TolerantChannel,
    TolerantSentinelChannel,
    transport_path,
)

KOMBU_FORM = "sentinel://:s3cret@h1:26379;sentinel://h2:26380;sentinel://h3/2?master_name=cache"


def test_kombu_form_is_parsed_into_sentinels_master_password_and_database() -> None:
    broker = parse_sentinel_url(KOMBU_FORM)
    assert broker == SentinelBroker(
        sentinels=(("h1", 26379), ("h2", 26380), ("h3", 26379)),
        master_name="cache",
        db=2,
        password="s3cret",
    )


def test_master_name_defaults_and_password_is_unquoted() -> None:
    broker = parse_sentinel_url("sentinel://user:p%40ss%3Bw@only:1")
    assert broker.master_name == DEFAULT_MASTER_NAME
    assert (broker.username, broker.password, broker.db) == ("user", "p@ss;w", 0)


@pytest.mark.parametrize(
    "url",
    [
        "sentinel://h1:1;redis://h2:2",  # schemes mixed
        "sentinel://:1",  # no host
        "sentinel://h1:1/zero",  # database not a number
        "sentinel://h1:1/0;sentinel://h2:1/1",  # databases disagree
        "sentinel://:a@h1:1;sentinel://:b@h2:1",  # passwords disagree
        "sentinel://h1:1?master=x",  # unknown option (a typo must not be ignored)
        ";",  # nothing at all
    ],
)
def test_malformed_sentinel_urls_are_refused(url: str) -> None:
    with pytest.raises(ValueError):
        parse_sentinel_url(url)


def test_errors_do_not_repeat_the_password() -> None:
    with pytest.raises(ValueError) as caught:
        parse_sentinel_url("sentinel://:hunter2@h1:1/x")
    assert "hunter2" not in str(caught.value)


def test_celery_gets_every_sentinel_with_credentials_and_no_query() -> None:
    url = celery_broker_url(KOMBU_FORM)
    assert url == (
        "sentinel://:s3cret@h1:26379/2;sentinel://:s3cret@h2:26380/2;sentinel://:s3cret@h3:26379/2"
    )
    # kombu itself reads it the same way: the first sentinel, its password and database.
    connection = Connection(url, transport_options=sentinel_transport_options(KOMBU_FORM))
    assert (connection.hostname, connection.port) == ("h1", 26379)
    assert (connection.password, connection.virtual_host) == ("s3cret", "2")
    assert len(connection.alt) == 3
    assert connection.transport_options == {"master_name": "cache"}


def test_celery_config_moves_the_master_name_into_transport_options() -> None:
    config = celery_config(broker_url=KOMBU_FORM + "&sentinel_password=x", visibility_timeout_s=9)
    options = config["broker_transport_options"]
    assert options["master_name"] == "cache"
    assert options["sentinel_kwargs"] == {"password": "x"}
    assert options["visibility_timeout"] == 9
    assert "?" not in config["broker_url"]


def test_plain_redis_urls_pass_through_unchanged() -> None:
    url = "rediss://:pw@cache.example:6380/3"
    assert not is_sentinel_url(url)
    assert celery_broker_url(url) == url
    assert sentinel_transport_options(url) == {}
    assert (
        "master_name"
        not in celery_config(broker_url=url, visibility_timeout_s=1)["broker_transport_options"]
    )
    client = redis_client(url)
    assert client.connection_pool.connection_kwargs["port"] == 6380
    assert not isinstance(client.connection_pool, redis.sentinel.SentinelConnectionPool)


def test_sentinel_clients_ask_the_sentinels_for_the_master() -> None:
    client = redis_client("sentinel://:pw@h1:1;sentinel://h2:2/4?master_name=m", socket_timeout=3)
    pool = client.connection_pool
    assert isinstance(pool, redis.sentinel.SentinelConnectionPool)
    assert pool.service_name == "m"
    assert pool.connection_kwargs["db"] == 4
    assert pool.connection_kwargs["password"] == "pw"
    sentinels = pool.sentinel_manager.sentinels
    assert [s.connection_pool.connection_kwargs["port"] for s in sentinels] == [1, 2]
    # The master's password is not the sentinels'; a socket option applies to both.
    assert sentinels[0].connection_pool.connection_kwargs.get("password") is None
    assert sentinels[0].connection_pool.connection_kwargs["socket_timeout"] == 3
    # Reconnects (also those of a retried command) ask the sentinels again.
    assert pool.connection_class is FollowingConnection
    assert pool.connection_kwargs["retry"].get_retries() > 0


def test_async_sentinel_client_asks_the_sentinels_too() -> None:
    client = async_redis_client("sentinel://h1:1?master_name=m&sentinel_password=sp")
    assert isinstance(client, aioredis.Redis)
    pool = client.connection_pool
    assert isinstance(pool, aiosentinel.SentinelConnectionPool)
    assert pool.service_name == "m"
    sentinel_kwargs = pool.sentinel_manager.sentinels[0].connection_pool.connection_kwargs
    assert sentinel_kwargs["password"] == "sp"
    assert pool.connection_class is AsyncFollowingConnection


def test_workers_pick_the_sentinel_transport_for_sentinel_urls() -> None:
    assert transport_path(KOMBU_FORM) == SENTINEL_TRANSPORT_PATH
    assert transport_path("redis://h:1/0") == TRANSPORT_PATH
    # The sentinel channel keeps llmq's behaviour and accepts kombu's sentinel options.
    assert issubclass(TolerantSentinelChannel, TolerantChannel)
    assert "master_name" in TolerantSentinelChannel.from_transport_options
    assert "llmq_worker_id" in TolerantSentinelChannel.from_transport_options


@pytest.mark.parametrize(
    ("seqs", "gaps"),
    [([0, 1, 2, 3], 0), ([0, 2, 3], 1), ([0, 1, 1, 2], 1), ([0, 2, 1], 1), ([], 0)],
)
def test_stream_gaps_count_missing_repeated_and_reordered_events(
    seqs: list[int], gaps: int
) -> None:
    assert count_gaps(seqs) == gaps
