"""Per-key fairness: one API key cannot fill a shared queue or hold every stream.

Two limits per key, both refused with 429 and ``Retry-After``:

* **active jobs** (queued plus running), counted from the job table with one indexed
  ``COUNT`` at submit, plus the submits of that key this gateway has in flight (so a
  burst of concurrent calls cannot all pass one stale count);
* **open streams**, a Redis sorted set of stream leases per key shared by every
  gateway; each lease carries an expiry, so a gateway that dies holding streams frees
  them after the longest a stream may last instead of never.
"""

from __future__ import annotations

import asyncio
import contextlib
import secrets
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager

import anyio
import redis.asyncio as aioredis
from redis.exceptions import RedisError
from sqlalchemy import func, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker
from starlette.responses import StreamingResponse
from starlette.types import Receive, Scope, Send

from producer.gateway.errors import GatewayError, rate_limited
from schemas.errors import BrokerUnavailable, DatabaseUnavailable
from schemas.jobs import JobStatus
from schemas.queues import open_streams_key
from schemas.tables import Job

ACTIVE_JOBS_RETRY_S = 5
OPEN_STREAMS_RETRY_S = 5

# KEYS[1]: the key's stream leases. ARGV: now (ms), lease expiry (ms), lease id, limit.
# Returns 1 if the lease was taken, 0 if the key already holds ``limit`` streams.
_TAKE_STREAM = """
redis.call('ZREMRANGEBYSCORE', KEYS[1], '-inf', ARGV[1])
if redis.call('ZCARD', KEYS[1]) >= tonumber(ARGV[4]) then return 0 end
redis.call('ZADD', KEYS[1], ARGV[2], ARGV[3])
redis.call('PEXPIREAT', KEYS[1], ARGV[2])
return 1
"""


def count_active_jobs(sessions: sessionmaker[Session], owner: str) -> int:
    """Jobs of ``owner`` that are queued or running (uses the index on ``owner``)."""
    query = (
        select(func.count())
        .select_from(Job)
        .where(Job.owner == owner, Job.status.in_([JobStatus.QUEUED, JobStatus.RUNNING]))
    )
    try:
        with sessions() as session:
            return int(session.scalar(query) or 0)
    except SQLAlchemyError as exc:
        raise DatabaseUnavailable("the job database is unreachable; nothing was queued") from exc


class KeyFairness:
    """The per-key limits of one gateway process."""

    def __init__(
        self,
        *,
        sessions: Callable[[], sessionmaker[Session]],
        redis: Callable[[], aioredis.Redis],
        max_active_jobs: int,
        max_open_streams: int,
        stream_lease_s: float,
    ) -> None:
        self._sessions = sessions
        self._redis = redis
        self.max_active_jobs = max_active_jobs
        self.max_open_streams = max_open_streams
        self.stream_lease_s = stream_lease_s
        self._submitting: dict[str, int] = {}

    @asynccontextmanager
    async def submitting(self, key_id: str) -> AsyncIterator[None]:
        """Hold a place for one submit of ``key_id``; raises 429 if the key is at its limit."""
        self._submitting[key_id] = self._submitting.get(key_id, 0) + 1
        try:
            active = await asyncio.to_thread(count_active_jobs, self._sessions(), key_id)
            # This submit and the others in flight are not in the table yet.
            if active + self._submitting[key_id] > self.max_active_jobs:
                raise GatewayError(
                    f"this API key has {active} queued or running jobs, its limit is "
                    f"{self.max_active_jobs}; wait for some to finish",
                    rate_limited(ACTIVE_JOBS_RETRY_S),
                )
            yield
        finally:
            self._submitting[key_id] -= 1
            if not self._submitting[key_id]:
                del self._submitting[key_id]

    async def open_stream(self, key_id: str) -> Callable[[], Awaitable[None]]:
        """Take one of the key's stream slots; returns the function that gives it back.

        Raises a 429 ``GatewayError`` when the key already holds its limit of streams.
        """
        client = self._redis()
        lease = secrets.token_hex(8)
        set_key = open_streams_key(key_id)
        try:
            seconds, micros = await client.time()
            now_ms = int(seconds) * 1000 + int(micros) // 1000
            taken = await client.eval(
                _TAKE_STREAM,
                1,
                set_key,
                now_ms,
                now_ms + int(self.stream_lease_s * 1000),
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
        client = self._redis()
        seconds, micros = await client.time()
        now_ms = int(seconds) * 1000 + int(micros) // 1000
        return int(await client.zcount(open_streams_key(key_id), f"({now_ms}", "+inf"))


class ReleasingStreamingResponse(StreamingResponse):
    """A streaming response that gives a stream slot back however the response ends.

    The release runs after the response returns, raises or is cancelled (the client
    went away), which a ``finally`` in the body generator alone cannot promise: a
    generator cancelled before its first step never runs its ``finally``.
    """

    def __init__(
        self,
        content: AsyncIterable[bytes],
        *,
        release: Callable[[], Awaitable[None]],
        media_type: str,
    ) -> None:
        super().__init__(content, media_type=media_type)
        self._release = release

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            await self._release()
