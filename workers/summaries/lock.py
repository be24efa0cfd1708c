"""The per-night Redis lock: one summary runner works a night at a time."""

from __future__ import annotations

import secrets
from datetime import date

import redis

from schemas.queues import summary_night_lock_key

_OURS = "if redis.call('get', KEYS[1]) == ARGV[1] then return "
_RENEW = _OURS + "redis.call('pexpire', KEYS[1], ARGV[2]) end return 0"
_RELEASE = _OURS + "redis.call('del', KEYS[1]) end return 0"


class NightLock:
    """A lease on one night, renewed while its runner works and lapsing if it dies.

    It keeps a second runner (a second beat, a by-hand ``llmq summarize``) from
    submitting the same summary steps at the same time; it is not what prevents
    duplicate summaries (the unique constraint does), so a lapsed lease costs at most
    repeated polling, never a second summary.
    """

    def __init__(self, client: redis.Redis, day: date, *, ttl_s: float = 60.0) -> None:
        self._redis = client
        self.key = summary_night_lock_key(day.isoformat())
        self._token = secrets.token_hex(16)
        self._ttl_ms = int(ttl_s * 1000)

    def acquire(self) -> bool:
        """Take the lease if nobody holds it; True if this runner has it now."""
        taken = self._redis.set(self.key, self._token, nx=True, px=self._ttl_ms)
        return bool(taken)

    def renew(self) -> bool:
        """Extend the lease; False if it lapsed and someone else holds it (or nobody)."""
        return bool(self._redis.eval(_RENEW, 1, self.key, self._token, self._ttl_ms))

    def release(self) -> None:
        """Give the lease back, only if it is still this runner's."""
        self._redis.eval(_RELEASE, 1, self.key, self._token)
