"""Publishing a job's stream events: pub/sub for live readers, a list for late ones."""

from __future__ import annotations

import redis

from schemas.events import ErrorEvent, FinalEvent, Timings, TokenEvent, Usage
from schemas.queues import event_channel, event_log_key


class StreamPublisher:
    """Numbers a job's events from 0 and publishes each to the log, then to pub/sub.

    The list index of an event equals its sequence number, which is what lets a
    reader replay from any point. One round trip per event.
    """

    def __init__(self, client: redis.Redis, job_id: str, *, ttl_s: int) -> None:
        self._redis = client
        self._channel = event_channel(job_id)
        self._log_key = event_log_key(job_id)
        self._ttl_s = ttl_s
        self.seq = 0

    def reset(self) -> None:
        """Start the log afresh (a new attempt of the job)."""
        self._redis.delete(self._log_key)
        self.seq = 0

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
        pipe = self._redis.pipeline(transaction=False)
        pipe.rpush(self._log_key, payload)
        pipe.expire(self._log_key, self._ttl_s)
        pipe.publish(self._channel, payload)
        pipe.execute()
        self.seq += 1
