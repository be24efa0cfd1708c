"""One Redis round trip for the next event of every job a worker streams at once.

Each job's thread appends its stream's events itself, and waits for each to be in
Redis. With many streams, each engine step hands every job a token at the same moment,
and one round trip per token per job is what the worker spends most of its own CPU
on: a command packed and parsed by redis-py, a send and a receive, and a thread woken
for each, on the core the engine leaves free. So the appends are combined: the
thread that finds nobody sending becomes the sender and sends what is waiting in one
pipeline, and threads that arrive meanwhile add theirs for the next pipeline and wait.
A lone stream sends its own event at once, as before; sixteen streams take two round
trips per step instead of sixteen.

The guarantees are the publisher's own: an event returns only once it is appended at
its own index (a resent event appends nothing twice, and a log that a restarted Redis
lost is written again from the job's copy), and an error is raised in the thread whose
event it was. A pipeline that cannot reach Redis is retried whole on the publisher's
schedule; an event that one job's log refuses is retried alone, so it holds back no
other job. While a pipeline is retried, events that arrive wait for it (Redis is down
for them too), so in an outage an event may wait up to two schedules.
"""

from __future__ import annotations

import copy
import threading
from collections.abc import Sequence
from dataclasses import dataclass

import redis

from schemas.retry import retry_call
from schemas.stream_log import EventLog
from schemas.timeouts import DEFAULT_TIMEOUTS

# A Redis restart or failover takes seconds; events wait for it in order rather than
# failing a job whose generation is fine. The default of
# ``settings.timeouts.publish_retry_delays_s``, for a combiner built without settings.
PUBLISH_RETRY_DELAYS_S = DEFAULT_TIMEOUTS.publish_retry_delays_s


@dataclass
class _Append:
    """One event waiting to be appended: its log, its index, the job's events so far."""

    log: EventLog
    sent: Sequence[str]
    """The job's events, this one at ``index`` (a job whose thread stopped while
    sending may publish more before a later sender takes this one)."""
    index: int
    done: bool = False
    error: redis.RedisError | None = None

    @property
    def payload(self) -> str:
        return self.sent[self.index]


class AppendCombiner:
    """Combines concurrent ``EventLog`` appends into pipelines on ``client``, the
    Redis client every combined log was made with."""

    def __init__(
        self, client: redis.Redis, *, retry_delays_s: Sequence[float] = PUBLISH_RETRY_DELAYS_S
    ) -> None:
        self._client = client
        self._retry_delays_s = retry_delays_s
        self._lock = threading.Lock()
        self._turn = threading.Condition(self._lock)
        self._waiting: list[_Append] = []
        self._sending = False

    def append(self, log: EventLog, sent: Sequence[str]) -> None:
        """Append ``sent[-1]`` as event ``len(sent) - 1`` of ``log`` and publish it;
        returns once it is in Redis. Raises ``redis.RedisError`` once retries ran out."""
        item = _Append(log, sent, len(sent) - 1)
        with self._lock:
            self._waiting.append(item)
        while not item.done:
            batch = self._next_batch(item)
            if batch:
                self._send_batch(batch)
        if item.error is not None:
            # A copy per thread: the same error object raised in many threads would
            # carry all their tracebacks.
            raise copy.copy(item.error) from item.error

    def _next_batch(self, item: _Append) -> list[_Append]:
        """Once nobody is sending: everything waiting, to send now; [] if ``item`` was
        sent meanwhile."""
        with self._lock:
            self._turn.wait_for(lambda: item.done or not self._sending)
            if item.done:
                return []
            self._sending = True
            batch, self._waiting = self._waiting, []
            return batch

    def _send_batch(self, batch: list[_Append]) -> None:
        try:
            self._send(batch)
        except BaseException:
            # The sender itself is stopping (an interrupt, a bug): what it did not get
            # to goes back first in line for the next sender.
            with self._lock:
                self._waiting[:0] = [item for item in batch if not item.done]
            raise
        finally:
            with self._lock:
                self._sending = False
                self._turn.notify_all()

    def _send(self, batch: list[_Append]) -> None:
        """Append every event of ``batch`` in order, marking each done (or failed)."""
        try:
            replies = retry_call(
                lambda: self._pipelined(batch),
                delays=self._retry_delays_s,
                retry_on=redis.RedisError,
                what="publish stream events",
            )
        except redis.RedisError as exc:
            for item in batch:
                item.error = exc
                item.done = True
            return
        for item, reply in zip(batch, replies, strict=True):
            if not _landed(item, reply):
                # Refused (a lost script or log, this job's key): alone, on the schedule.
                self._append_alone(item)
            item.done = True

    def _pipelined(self, batch: list[_Append]) -> list[object]:
        """Every event's append in one round trip; each reply, or the error of its own."""
        if len(batch) == 1:  # a lone stream: no pipeline to build
            item = batch[0]
            return [item.log.append(item.index, item.payload)]
        pipe = self._client.pipeline(transaction=False)
        for item in batch:
            item.log.queue_append(pipe, item.index, item.payload)
        replies: list[object] = pipe.execute(raise_on_error=False)
        return [EventLog.appended(reply) if isinstance(reply, int) else reply for reply in replies]

    def _append_alone(self, item: _Append) -> None:
        try:
            retry_call(
                lambda: item.log.append_or_restore(item.sent[: item.index + 1]),
                delays=self._retry_delays_s,
                retry_on=redis.RedisError,
                what="publish a stream event",
            )
        except redis.RedisError as exc:
            item.error = exc


def _landed(item: _Append, reply: object) -> bool:
    """Whether ``reply`` says the event is in its log: appended now (None), or the log
    is already past it (a resent pipeline)."""
    return reply is None or (isinstance(reply, int) and reply > item.index)
