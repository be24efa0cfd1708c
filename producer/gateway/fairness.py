"""Per-key fairness: one API key cannot fill a shared queue or hold every stream.

Two limits per key, both refused with 429 and ``Retry-After``:

* **active jobs** (queued plus running), counted from the job table with one indexed
  ``COUNT``, plus the submits of that key this gateway has in flight (so a burst of
  concurrent calls cannot all pass one stale count). The count is read at most once a
  second per key, and counts up with every submit in between (so it errs high, never
  low); a key that looks at its limit is counted afresh before it is refused. A count
  over a second old is renewed after the submit that found it so, and used until then:
  the database round trip stays off every request's first-token path but a key's first;
* **open streams**, a Redis sorted set of stream leases per key shared by every
  gateway; each lease carries an expiry, so a gateway that dies holding streams frees
  them after the longest a stream may last instead of never.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
import time
from collections.abc import AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from dataclasses import dataclass, field

import anyio
import redis.asyncio as aioredis
from redis.exceptions import RedisError
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from producer.gateway.errors import GatewayError, rate_limited
from schemas.errors import BrokerUnavailable, DatabaseUnavailable
from schemas.jobs import JobStatus
from schemas.queues import open_streams_key
from schemas.tables import Job

# Not settings: Retry-After hints of a 429, not bounds; a client may retry sooner.
ACTIVE_JOBS_RETRY_S = 5
OPEN_STREAMS_RETRY_S = 5

# Not a setting: how long a key's counted jobs are reused, an implementation cache
# (the limit itself is LLMQ_KEY_MAX_ACTIVE_JOBS).
ACTIVE_COUNT_FRESH_S = 1.0

# KEYS[1]: the key's stream leases. ARGV: lease length (ms), lease id, limit. Redis's
# own clock dates the lease (one round trip, no gateway clock). Returns 1 if the lease
# was taken, 0 if the key already holds ``limit`` streams.
_TAKE_STREAM = """
local now_parts = redis.call('TIME')
local now = tonumber(now_parts[1]) * 1000 + math.floor(tonumber(now_parts[2]) / 1000)
local expiry = now + tonumber(ARGV[1])
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', now)
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[3]) then return 0 end
redis.call('ZADD', KEYS[1], expiry, ARGV[2])
redis.call('PEXPIREAT', KEYS[1], expiry)
return 1
"""


def count_active_jobs(sessions: sessionmaker[Session], owner: str) -> int:
    """Jobs of ``owner`` that are queued or running (uses the index on ``owner``)."""
    query = (
        select(func.count())
        .select_from(Job)
        .where(
            Job.owner == owner,
            Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]),
            # A batch's lines wait within the batch queue's depth limit instead.
            Job.batch_id.is_(None),
        )
    )
    try:
        with sessions() as session:
            return int(session.scalar(query) or 0)
    except SQLAlchemyError as exc:
        raise DatabaseUnavailable("the job database is unreachable; nothing was queued") from exc


@dataclass(eq=False, kw_only=True)
class KeyFairness:
    """The per-key limits of one gateway process; ``sessions`` and ``redis`` are read at
    each use (the gateway's client opens only with its lifespan)."""

    sessions: Callable[[], sessionmaker[Session]]
    redis: Callable[[], aioredis.Redis]
    max_active_jobs: int
    max_open_streams: int
    stream_lease_s: float
    _submitting: dict[str, int] = field(default_factory=dict, init=False, repr=False)
    _counted: dict[str, tuple[int, float]] = field(default_factory=dict, init=False, repr=False)
    _renewing: dict[str, asyncio.Task[None]] = field(default_factory=dict, init=False, repr=False)

    @asynccontextmanager
    async def submitting(self, key_id: str) -> AsyncIterator[None]:
        """Hold a place for one submit of ``key_id``; raises 429 if the key is at its limit."""
        self._submitting[key_id] = self._submitting.get(key_id, 0) + 1
        try:
            # This submit and the others in flight are not in the table yet.
            active = await self._active_jobs(key_id, fresh=False)
            if active + self._submitting[key_id] > self.max_active_jobs:
                active = await self._active_jobs(key_id, fresh=True)
            if active + self._submitting[key_id] > self.max_active_jobs:
                raise GatewayError(
                    f"this API key has {active} queued or running jobs, its limit is "
                    f"{self.max_active_jobs}; wait for some to finish",
                    rate_limited(ACTIVE_JOBS_RETRY_S),
                )
            yield
            count, counted_at = self._counted[key_id]
            self._counted[key_id] = (count + 1, counted_at)
        finally:
            self._submitting[key_id] -= 1
            if not self._submitting[key_id]:
                del self._submitting[key_id]
        if time.monotonic() - self._counted[key_id][1] >= ACTIVE_COUNT_FRESH_S:
            self._renew_soon(key_id)

    async def _active_jobs(self, key_id: str, *, fresh: bool) -> int:
        """The key's active jobs: from the table, or counted up from an earlier read
        (``fresh``: from the table)."""
        cached = self._counted.get(key_id)
        if fresh or cached is None:
            return await self._count(key_id)
        return cached[0]

    async def _count(self, key_id: str) -> int:
        now = time.monotonic()
        count = await asyncio.to_thread(count_active_jobs, self.sessions(), key_id)
        self._counted[key_id] = (count, now)
        return count

    def _renew_soon(self, key_id: str) -> None:
        """Count the key's jobs afresh in the background (once at a time per key)."""
        if key_id in self._renewing:
            return
        self._renewing[key_id] = asyncio.create_task(self._renew(key_id))

    async def _renew(self, key_id: str) -> None:
        try:
            await self._count(key_id)
        except DatabaseUnavailable:
            pass  # the count kept errs high; the key's next submit tries again
        finally:
            del self._renewing[key_id]

    async def open_stream(self, key_id: str) -> Callable[[], Awaitable[None]]:
        """Take one of the key's stream slots; returns the function that gives it back.

        Raises a 429 ``GatewayError`` when the key already holds its limit of streams.
        """
        client = self.redis()
        lease = secrets.token_hex(8)
        set_key = open_streams_key(key_id)
        try:
            taken = await client.eval(
                _TAKE_STREAM,
                1,
                set_key,
                int(self.stream_lease_s * 1000),
                lease,
                self.max_open_streams,
            )
        except RedisError as exc:
            raise BrokerUnavailable("Redis is unreachable; the request was not served") from exc
        if not int(taken):
            raise GatewayError(
                f"this API key has {self.max_open_streams} streams open, its limit; "
                "close one or wait for it to finish",
                rate_limited(OPEN_STREAMS_RETRY_S),
            )

        async def release() -> None:
            # Shielded: a stream ends by cancellation when its client goes away, and the
            # slot must be given back all the same.
            with anyio.CancelScope(shield=True):
                with contextlib.suppress(RedisError):  # else the lease expires on its own
                    await client.zrem(set_key, lease)

        return release

    async def open_streams(self, key_id: str) -> int:
        """How many streams ``key_id`` holds open now (leases not yet expired)."""
        client = self.redis()
        seconds, micros = await client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        return int(await client.zcount(open_streams_key(key_id), f"({now_ms}", "+inf"))
