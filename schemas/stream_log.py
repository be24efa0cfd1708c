"""A job's replay log and live channel: the one way a stream event is written.

Every event goes to a Redis list whose index is its sequence number (so a reader can
replay from any point) and then to the job's pub/sub channel (for live readers). The
worker's publisher and the producer's cancel of a queued job both append through
:class:`EventLog`, so an event never lands at an index other than its number.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis

from schemas.events import AnyEvent
from schemas.queues import event_channel, event_log_key

# KEYS: log, channel. ARGV: the event's number, the event, the log's TTL.
# Returns -1 once appended, or the log's length when that is not the event's number.
APPEND_EVENT = """
local length = redis.call('LLEN', KEYS[1])
if length ~= tonumber(ARGV[1]) then
    return length
end
redis.call('RPUSH', KEYS[1], ARGV[2])
redis.call('EXPIRE', KEYS[1], ARGV[3])
redis.call('PUBLISH', KEYS[2], ARGV[2])
return -1
"""


class EventLog:
    """The replay log and channel of one job, with the TTL every append renews."""

    def __init__(self, client: redis.Redis, job_id: str, *, ttl_s: int) -> None:
        self._redis = client
        self._key = event_log_key(job_id)
        self._channel = event_channel(job_id)
        self._ttl_s = ttl_s
        self._append = client.register_script(APPEND_EVENT)

    def entries(self) -> list[str]:
        """Every event in the log, oldest first, as JSON text."""
        raw_events = self._redis.lrange(self._key, 0, -1)
        return [raw.decode() if isinstance(raw, bytes) else str(raw) for raw in raw_events]

    def append(self, seq: int, payload: str) -> int | None:
        """Append ``payload`` as event ``seq`` and publish it; one round trip.

        Appends only when the log holds exactly ``seq`` events, so a retried call never
        appends twice. Returns None once appended, else the log's length (nothing
        written). Raises ``redis.RedisError``.
        """
        return self.appended(
            int(self._append(keys=[self._key, self._channel], args=[seq, payload, self._ttl_s]))
        )

    def append_or_restore(self, sent: Sequence[str]) -> None:
        """Append ``sent[-1]`` as event ``len(sent) - 1``, after writing back whatever
        of ``sent`` a restarted Redis lost; one round trip when nothing was lost.

        Safe to retry whole: the append writes only at the event's own number, and the
        write-back happens only after an append found the log short.
        Raises ``redis.RedisError``.
        """
        index = len(sent) - 1
        length = self.append(index, sent[index])
        if length is not None and length < index:
            self.restore(sent[length:])

    def queue_append(self, pipe: redis.client.Pipeline, seq: int, payload: str) -> None:
        """:meth:`append` as one command of ``pipe``, whose reply :meth:`appended` reads
        (or an error: ``NoScriptError`` from a Redis that lost its scripts)."""
        pipe.evalsha(self._append.sha, 2, self._key, self._channel, seq, payload, self._ttl_s)

    @staticmethod
    def appended(reply: int) -> int | None:
        """An append's reply: None once appended, else the log's length."""
        return None if reply < 0 else reply

    def append_next(self, make: Callable[[int], AnyEvent]) -> AnyEvent:
        """Append ``make(n)`` where ``n`` is the log's length; returns the event written.

        Another writer appending in between only moves ``n`` on; the event is built again.
        Raises ``redis.RedisError``.
        """
        seq = int(self._redis.llen(self._key))
        while True:
            event = make(seq)
            length = self.append(seq, event.model_dump_json())
            if length is None:
                return event
            seq = length

    def restore(self, missing: Sequence[str]) -> None:
        """Write ``missing`` (the log's lost tail, ending with the newest event) back and
        publish the newest; for a log that a Redis restart emptied or cut short."""
        pipe = self._redis.pipeline(transaction=True)
        pipe.rpush(self._key, *missing)
        pipe.expire(self._key, self._ttl_s)
        pipe.publish(self._channel, missing[-1])
        pipe.execute()
