"""The broker URL, and the Redis clients llmq builds from it.

``LLMQ_BROKER_URL`` is either one Redis (``redis://``, ``rediss://``, ``unix://``) or a
group of Redis Sentinels, in kombu's own form so that the same string also configures
Celery::

    sentinel://[[user]:password@]host1:26379;sentinel://host2:26379;sentinel://host3:26379/0?master_name=mymaster

Sentinels are separated by ``;``. The password (and user) is the Redis master's, not the
sentinels'; the database number (``/0``) and the query may be written on any entry
(they apply to all). The query names the monitored master (``master_name``, default
``mymaster``) and, where the sentinels themselves require a password,
``sentinel_password``. Celery gets the URL without the query (kombu takes the master
name from ``broker_transport_options``, see :func:`sentinel_transport_options`).

Through Sentinel every connection asks the sentinels where the master is before it
connects, so after a failover new connections (and every reconnect) reach the promoted
replica.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any
from urllib.parse import parse_qsl, quote, unquote, urlsplit

import redis
import redis.asyncio as aioredis
import redis.asyncio.retry
import redis.asyncio.sentinel as aiosentinel
import redis.retry
import redis.sentinel
from redis.backoff import ExponentialWithJitterBackoff

SENTINEL_SCHEME = "sentinel"
DEFAULT_MASTER_NAME = "mymaster"
DEFAULT_SENTINEL_PORT = 26379
# Not a setting: a sentinel answers one short query; a slow one is skipped for the next.
# Asking a sentinel where the master is must not hang a client when one sentinel does.
SENTINEL_SOCKET_TIMEOUT_S = 1.0
_QUERY_KEYS = frozenset({"master_name", "sentinel_password"})
# Not settings: redis-py's own policy, copied so both kinds of client behave alike.
# A client built on a sentinel-managed pool gets no retry policy of its own; give it
# the one redis-py gives a client from a URL (10 tries, 10 ms doubling up to 1 s), so
# a command during a failover waits for the promoted master instead of failing.
RETRIES = 10
RETRY_BASE_S = 0.01
RETRY_CAP_S = 1.0


@dataclass(frozen=True)
class SentinelBroker:
    """A parsed ``sentinel://`` broker URL."""

    sentinels: tuple[tuple[str, int], ...]
    master_name: str = DEFAULT_MASTER_NAME
    db: int = 0
    username: str | None = None
    password: str | None = None
    sentinel_password: str | None = None

    def celery_url(self) -> str:
        """The URL for Celery/kombu: every sentinel with the credentials and database.

        kombu reads credentials and database from whichever entry it is connected
        through (it moves on to the next one after a connection error), so each
        entry carries them; the query, which kombu does not understand, is left out.
        """
        credentials = ""
        if self.username is not None or self.password is not None:
            user = quote(self.username or "", safe="")
            secret = quote(self.password or "", safe="")
            credentials = f"{user}:{secret}@"
        return ";".join(
            f"{SENTINEL_SCHEME}://{credentials}{_host(host)}:{port}/{self.db}"
            for host, port in self.sentinels
        )

    def transport_options(self) -> dict[str, Any]:
        """kombu's ``broker_transport_options`` entries for these sentinels."""
        options: dict[str, Any] = {"master_name": self.master_name}
        if self.sentinel_password is not None:
            options["sentinel_kwargs"] = {"password": self.sentinel_password}
        return options

    def connection_kwargs(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """Keyword arguments for connections to the master."""
        kwargs: dict[str, Any] = {"db": self.db}
        if self.username is not None:
            kwargs["username"] = self.username
        if self.password is not None:
            kwargs["password"] = self.password
        kwargs.update(overrides)
        return kwargs

    def sentinel_kwargs(self, overrides: dict[str, Any]) -> dict[str, Any]:
        """Keyword arguments for connections to the sentinels themselves."""
        kwargs: dict[str, Any] = {
            "socket_timeout": SENTINEL_SOCKET_TIMEOUT_S,
            "socket_connect_timeout": SENTINEL_SOCKET_TIMEOUT_S,
        }
        kwargs.update({k: v for k, v in overrides.items() if k.startswith("socket_")})
        if self.sentinel_password is not None:
            kwargs["password"] = self.sentinel_password
        return kwargs


class FollowingConnection(redis.sentinel.SentinelManagedConnection):
    """A sentinel-managed connection that asks the sentinels again on every reconnect.

    redis-py's own reconnects the socket of a retried command to the address it had
    (``send_packed_command`` skips the sentinel lookup), which during a failover is
    the dead master: every retry fails. Here reconnecting goes through ``connect``.
    """

    def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self._sock:
            self.connect()  # type: ignore[no-untyped-call, unused-ignore]
        super().send_packed_command(command, check_health)  # type: ignore[no-untyped-call, unused-ignore]


class AsyncFollowingConnection(aiosentinel.SentinelManagedConnection):
    """The asyncio twin of :class:`FollowingConnection`."""

    async def send_packed_command(self, command: Any, check_health: bool = True) -> None:
        if not self.is_connected:
            await self.connect()  # type: ignore[no-untyped-call, unused-ignore]
        await super().send_packed_command(command, check_health)


def _host(host: str) -> str:
    return f"[{host}]" if ":" in host else host


def is_sentinel_url(url: str) -> bool:
    """True if ``url`` names Redis Sentinels rather than one Redis."""
    return url.strip().lower().startswith(f"{SENTINEL_SCHEME}://")


def parse_sentinel_url(url: str) -> SentinelBroker:
    """Parse a ``sentinel://`` URL (see the module docstring).

    Raises ``ValueError`` (without repeating the URL, which may hold a password) for
    another scheme, an entry without a host, an unknown query key, a database that is
    not a number, or entries that disagree on credentials or database.
    """
    sentinels: list[tuple[str, int]] = []
    query: dict[str, str] = {}
    credentials: set[tuple[str | None, str | None]] = set()
    databases: set[int] = set()
    for entry in (part.strip() for part in url.split(";")):
        if not entry:
            continue
        parts = urlsplit(entry)
        if parts.scheme.lower() != SENTINEL_SCHEME:
            raise ValueError(f"every broker URL entry must be sentinel://, not {parts.scheme}://")
        if not parts.hostname:
            raise ValueError("a sentinel:// entry has no host")
        try:
            port = parts.port or DEFAULT_SENTINEL_PORT
        except ValueError as exc:
            raise ValueError("a sentinel:// entry has an invalid port") from exc
        sentinels.append((parts.hostname, port))
        if parts.username is not None or parts.password is not None:
            credentials.add((_unquote(parts.username), _unquote(parts.password)))
        path = parts.path.strip("/")
        if path:
            if not path.isdigit():
                raise ValueError("the database in a sentinel:// URL must be a number")
            databases.add(int(path))
        for key, value in parse_qsl(parts.query, keep_blank_values=True):
            if key not in _QUERY_KEYS:
                raise ValueError(
                    f"unknown sentinel:// URL option {key!r}; known: {sorted(_QUERY_KEYS)}"
                )
            query[key] = value
    if not sentinels:
        raise ValueError("a sentinel:// URL names no sentinel")
    if len(credentials) > 1 or len(databases) > 1:
        raise ValueError("the entries of a sentinel:// URL disagree on password or database")
    username, password = next(iter(credentials), (None, None))
    return SentinelBroker(
        sentinels=tuple(sentinels),
        master_name=query.get("master_name") or DEFAULT_MASTER_NAME,
        db=next(iter(databases), 0),
        username=username or None,
        password=password,
        sentinel_password=query.get("sentinel_password"),
    )


def _unquote(value: str | None) -> str | None:
    return None if value is None else unquote(value)


def celery_broker_url(url: str) -> str:
    """The broker URL as Celery must be given it (sentinel options moved out)."""
    return parse_sentinel_url(url).celery_url() if is_sentinel_url(url) else url


def sentinel_transport_options(url: str) -> dict[str, Any]:
    """``broker_transport_options`` that a sentinel URL needs (none for plain Redis)."""
    return parse_sentinel_url(url).transport_options() if is_sentinel_url(url) else {}


MAX_CONNECTIONS = 10_000
"""Connections one client's pool may open. redis-py caps a pool at 100, and a gateway
holds one connection per open stream (its pub/sub subscription): under a batch flood
the 101st stream, and every request after it, failed as if Redis were down."""


def redis_client(url: str, **kwargs: Any) -> redis.Redis:
    """A Redis client for the broker at ``url``; keyword arguments go to its connections
    (``max_connections`` is :data:`MAX_CONNECTIONS` unless given).

    For a sentinel URL the client connects to whichever server the sentinels name as
    master, asking again on every reconnect, so it follows a failover. Connecting is
    lazy: this raises only ``ValueError`` for a malformed sentinel URL.
    """
    kwargs.setdefault("max_connections", MAX_CONNECTIONS)
    if not is_sentinel_url(url):
        return redis.Redis.from_url(url, **kwargs)
    broker = parse_sentinel_url(url)
    sentinel = redis.sentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(broker.sentinels), sentinel_kwargs=broker.sentinel_kwargs(kwargs)
    )
    retry = redis.retry.Retry(ExponentialWithJitterBackoff(RETRY_BASE_S, RETRY_CAP_S), RETRIES)
    client: redis.Redis = sentinel.master_for(  # type: ignore[no-untyped-call, unused-ignore]
        broker.master_name,
        **broker.connection_kwargs(
            {"retry": retry, "connection_class": FollowingConnection, **kwargs}
        ),
    )
    return client


def async_redis_client(url: str, **kwargs: Any) -> aioredis.Redis:
    """The asyncio twin of :func:`redis_client`, with the same promises."""
    kwargs.setdefault("max_connections", MAX_CONNECTIONS)
    if not is_sentinel_url(url):
        return aioredis.Redis.from_url(url, **kwargs)
    broker = parse_sentinel_url(url)
    sentinel = aiosentinel.Sentinel(  # type: ignore[no-untyped-call, unused-ignore]
        list(broker.sentinels), sentinel_kwargs=broker.sentinel_kwargs(kwargs)
    )
    retry = redis.asyncio.retry.Retry(
        ExponentialWithJitterBackoff(RETRY_BASE_S, RETRY_CAP_S), RETRIES
    )
    client: aioredis.Redis = sentinel.master_for(
        broker.master_name,
        **broker.connection_kwargs(
            {"retry": retry, "connection_class": AsyncFollowingConnection, **kwargs}
        ),
    )
    return client
