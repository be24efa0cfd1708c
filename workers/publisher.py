"""Publishing a job's stream events: pub/sub for live readers, a list for late ones."""

from __future__ import annotations

import redis

from schemas.events import (
    AttemptEvent,
    ErrorEvent,
    FinalEvent,
    Timings,
    TokenEvent,
    Usage,
    parse_event,
)
from schemas.queues import event_channel, event_log_key
from schemas.retry import retry_call

# A Redis restart or failover takes seconds; events wait for it in order rather than
# failing a job whose generation is fine.
PUBLISH_RETRY_DELAYS_S = (0.1, 0.25, 0.5, 1.0, 2.0, 2.0, 4.0, 4.0, 8.0, 8.0)

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


class StreamPublisher:
    """Numbers a job's events and publishes each to the log, then to pub/sub.

    The list index of an event equals its sequence number, which is what lets a
    reader replay from any point. One round trip per event. Every payload is also
    kept here, so a log that a Redis restart emptied is written again in full.
    Only one attempt of a job publishes at a time (the claim sees to that).
    """

    def __init__(self, client: redis.Redis, job_id: str, *, ttl_s: int) -> None:
        self._redis = client
        self._channel = event_channel(job_id)
        self._log_key = event_log_key(job_id)
        self._ttl_s = ttl_s
        self._sent: list[str] = []
        self._append = client.register_script(APPEND_EVENT)

    @property
    def seq(self) -> int:
        """Sequence number of the next event."""
        return len(self._sent)

    def adopt(self) -> None:
        """Continue the log an earlier attempt left, numbering new events after it."""
        raw_events = self._redis.lrange(self._log_key, 0, -1)
        self._sent = [raw.decode() if isinstance(raw, bytes) else str(raw) for raw in raw_events]

    def resume(self, attempt: int) -> str:
        """Take over the log of an earlier attempt; return the text it already streamed.

        Appends an ``attempt`` event, so readers know a new attempt goes on from there.
        """
        self.adopt()
        streamed = "".join(
            event.text
            for event in (parse_event(raw) for raw in self._sent)
            if isinstance(event, TokenEvent)
        )
        event = AttemptEvent(seq=self.seq, attempt=attempt, resumed_chars=len(streamed))
        self._emit(event.model_dump_json())
        return streamed

    def token(self, text: str) -> None:
        """Publish one chunk of generated text."""
        self._emit(TokenEvent(seq=self.seq, text=text).model_dump_json())

    def final(
        self,
        *,
        text: str,
        finish_reason: str | None,
        usage: Usage,
        timings: Timings,
        worker_id: str,
    ) -> None:
        """Publish the terminal success event."""
        event = FinalEvent(
            seq=self.seq,
            text=text,
            finish_reason=finish_reason,
            usage=usage,
            timings=timings,
            worker_id=worker_id,
        )
        self._emit(event.model_dump_json())

    def error(self, message: str) -> None:
        """Publish the terminal failure event."""
        self._emit(ErrorEvent(seq=self.seq, message=message).model_dump_json())

    def _emit(self, payload: str) -> None:
        self._sent.append(payload)
        retry_call(
            self._append_latest,
            delays=PUBLISH_RETRY_DELAYS_S,
            retry_on=redis.RedisError,
            what="publish a stream event",
        )

    def _append_latest(self) -> None:
        """Append the newest event at its own index, publish it; one round trip.

        The script appends only when the list is exactly as long as the event's number,
        so a retried call cannot append twice; when a restarted Redis lost the list, the
        missing events are written again first.
        """
        index = len(self._sent) - 1
        length = int(
            self._append(
                keys=[self._log_key, self._channel], args=[index, self._sent[index], self._ttl_s]
            )
        )
        if 0 <= length < index:
            pipe = self._redis.pipeline(transaction=True)
            pipe.rpush(self._log_key, *self._sent[length:])
            pipe.expire(self._log_key, self._ttl_s)
            pipe.publish(self._channel, self._sent[index])
            pipe.execute()
