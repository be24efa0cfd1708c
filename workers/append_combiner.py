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
its own index (a retried pipeline appends nothing twice, and a log that a restarted
Redis lost is written again from the job's copy), and a Redis outage is ridden out on
the same schedule, then raised in the thread whose event it was.
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import redis
from redis.exceptions import NoScriptError

from schemas.retry import retry_call
from schemas.stream_log import EventLog


@dataclass
class _Append:
    """One event waiting to be appended: its log, its index, the job's events so far."""

    log: EventLog
    sent: Sequence[str]
    """Every event of the job, this one at ``index`` (its thread waits: nothing is added)."""
    index: int
    done: bool = False
    error: redis.RedisError | None = None

    @property
    def payload(self) -> str:
        return self.sent[self.index]


class AppendCombiner:
    """Combines concurrent ``EventLog`` appends of one Redis client into pipelines."""

    def __init__(self, client: redis.Redis, *, retry_delays_s: Sequence[float]) -> None:
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
        while not self._take_turn(item):
            pass
        if item.error is not None:
            raise item.error

    def _take_turn(self, item: _Append) -> bool:
        """Send what waits if nobody is sending, else wait for the sender; True once
        ``item`` is done."""
        with self._lock:
            while self._sending and not item.done:
                self._turn.wait()
            if item.done:
                return True
            self._sending = True
            batch, self._waiting = self._waiting, []
        try:
            self._send(batch)
        finally:
            with self._lock:
                self._sending = False
                self._turn.notify_all()
        return item.done

    def _send(self, batch: list[_Append]) -> None:
        """Append every event of ``batch`` (in order), marking each done or failed."""
        try:
            lengths = retry_call(
                lambda: self._append_all(batch),
                delays=self._retry_delays_s,
                retry_on=redis.RedisError,
                what="publish stream events",
            )
        except redis.RedisError as exc:
            lengths = [None] * len(batch)
            for item in batch:
                item.error = exc
        for item, length in zip(batch, lengths, strict=True):
            if item.error is None and length is not None and length < item.index:
                self._restore(item, length)
            item.done = True

    def _append_all(self, batch: list[_Append]) -> list[int | None]:
        if len(batch) == 1:  # a lone stream: no pipeline to build
            return [batch[0].log.append(batch[0].index, batch[0].payload)]
        try:
            return self._pipelined(batch)
        except NoScriptError:  # a restarted Redis forgot the script; nothing was appended
            batch[0].log.load_script()
            return self._pipelined(batch)

    def _pipelined(self, batch: list[_Append]) -> list[int | None]:
        pipe = self._client.pipeline(transaction=False)
        for item in batch:
            item.log.queue_append(pipe, item.index, item.payload)
        return [EventLog.appended(reply) for reply in pipe.execute()]

    def _restore(self, item: _Append, length: int) -> None:
        """Write back the events a restarted Redis lost (the log holds ``length``)."""
        try:
            retry_call(
                lambda: item.log.restore(item.sent[length : item.index + 1]),
                delays=self._retry_delays_s,
                retry_on=redis.RedisError,
                what="restore a stream's log",
            )
        except redis.RedisError as exc:
            item.error = exc
