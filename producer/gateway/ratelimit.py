"""Per-key request limits: a fixed one-minute window counted in Redis."""

from __future__ import annotations

import time

import redis.asyncio as aioredis

WINDOW_S = 60


async def over_limit(client: aioredis.Redis, key_id: str, limit_per_min: int) -> int | None:
    """Count one request; return seconds to wait if the key is over its limit, else None."""
    window = int(time.time()) // WINDOW_S
    counter = f"llmq:ratelimit:{key_id}:{window}"
    pipe = client.pipeline(transaction=False)
    pipe.incr(counter)
    pipe.expire(counter, WINDOW_S * 2)
    count, _ = await pipe.execute()
    if int(count) <= limit_per_min:
        return None
    return WINDOW_S - int(time.time()) % WINDOW_S
