"""Sliding-window limits kept in Redis: requests per key, failed logins per address.

Each limited thing has a sorted set of its recent events (score: Redis's own clock in
milliseconds). One Lua script trims what fell out of the window, counts the rest and
adds the new event only when it is allowed, so concurrent gateways agree and no
gateway's clock matters. Unlike a fixed window, no burst of twice the limit fits
across a window boundary.
"""

from __future__ import annotations

import secrets

import redis.asyncio as aioredis
from redis.exceptions import RedisError

from schemas.errors import BrokerUnavailable
from schemas.queues import auth_failure_key, rate_limit_key

# Not a setting: the limits are counted per minute, as their names say (..._per_min).
WINDOW_S = 60

# KEYS[1]: the event log. ARGV: window in ms, limit, mode ("hit": count one event if
# under the limit; "check": count nothing; "record": count one event regardless), a
# unique member. Returns 0 when allowed, else milliseconds until the oldest event leaves.
_SLIDING_WINDOW = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local window = tonumber(ARGV[1])
local limit = tonumber(ARGV[2])
local mode = ARGV[3]
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now - window)
local count = redis.call('ZCARD', KEYS[1])
if mode == 'record' or (mode == 'hit' and count < limit) then
    redis.call('ZADD', KEYS[1], now, ARGV[4])
    redis.call('PEXPIRE', KEYS[1], window)
    return 0
end
if count < limit then return 0 end
local oldest = redis.call('ZRANGE', KEYS[1], 0, 0, 'WITHSCORES')
return math.max(1, tonumber(oldest[2]) + window - now)
"""


async def sliding_window(
    client: aioredis.Redis, key: str, *, limit: int, window_ms: int, mode: str = "hit"
) -> int | None:
    """Apply the window to ``key``; None if allowed, else whole seconds to wait (>= 1).

    ``mode``: "hit" counts one event if under ``limit`` (a refused one is not counted);
    "check" counts nothing; "record" counts one event regardless of the limit.
    """
    try:
        waited = await client.eval(
            _SLIDING_WINDOW, 1, key, window_ms, limit, mode, secrets.token_hex(8)
        )
    except RedisError as exc:
        raise BrokerUnavailable("Redis is unreachable; the request was not served") from exc
    millis = int(waited)
    return None if millis == 0 else max(1, -(-millis // 1000))


async def over_limit(client: aioredis.Redis, key_id: str, limit_per_min: int) -> int | None:
    """Count one request of ``key_id``; seconds to wait if it is over its limit, else None.

    A refused request is not counted, so a client that waits ``Retry-After`` gets in.
    """
    return await sliding_window(
        client, rate_limit_key(key_id), limit=limit_per_min, window_ms=WINDOW_S * 1000
    )


async def auth_blocked(client: aioredis.Redis, address: str, limit_per_min: int) -> int | None:
    """Seconds to wait if ``address`` failed authentication too often lately, else None."""
    return await sliding_window(
        client,
        auth_failure_key(address),
        limit=limit_per_min,
        window_ms=WINDOW_S * 1000,
        mode="check",
    )


async def record_auth_failure(client: aioredis.Redis, address: str) -> None:
    """Count one failed authentication from ``address``."""
    await sliding_window(
        client, auth_failure_key(address), limit=0, window_ms=WINDOW_S * 1000, mode="record"
    )
