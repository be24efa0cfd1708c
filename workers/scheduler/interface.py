"""The events a worker's scheduler takes, and the decisions each may answer.

Drivers program against this; :class:`workers.scheduler.Scheduler` implements it.

Each event, its method, and what it may answer:

- the consumer (re)started: ``consumer_started`` (then ``read_queues``);
- a message was received: ``message_received``, ``GiveWay`` for an interactive one;
- batch jobs were halted to give way: ``batch_halted``;
- a job ended: ``job_ended`` (then ``read_queues``, on the consumer's thread);
- the timer ticked: ``tick`` (then ``read_queues``);
- which queues to read: ``read_queues``, a ``ReadQueues``;
- an interactive request reached the engine: ``interactive_handed_over``, a ticket;
  its first token (or its end): ``interactive_prefill_done``;
- a batch job is about to start: ``batch_may_start``, then ``batch_prefill_place``,
  each ``Run`` or ``Hold``; its first token (or its end): ``batch_prefill_done``;
- an interactive first token, a finished request's inter-token time:
  ``first_token_measured``, ``inter_token_measured``, ``GiveWay`` on a cut;
- an interactive job finished: ``interactive_finished``;
- a batch job that gave way ended: ``gave_way``, a ``Requeue``.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Container
from typing import Protocol

from schemas.queues import Priority
from workers.scheduler.decisions import GiveWay, Hold, ReadQueues, Requeue, Run


class SchedulerInterface(Protocol):
    """A worker's scheduler: sans-IO, thread-safe, never blocking."""

    @property
    def clock(self) -> Callable[[], float]: ...

    def consumer_started(self) -> None: ...

    def message_received(self, job_id: str, priority: Priority) -> GiveWay | None: ...

    def batch_halted(self, job_ids: Collection[str]) -> None: ...

    def job_ended(self, job_id: str) -> None: ...

    def tick(self, known: Container[str]) -> int: ...

    def read_queues(self, batch_waiting: Callable[[], bool]) -> ReadQueues: ...

    def interactive_handed_over(self) -> int: ...

    def interactive_prefill_done(self, ticket: int) -> None: ...

    def batch_may_start(self, since: float) -> Run | Hold: ...

    def batch_prefill_place(self, since: float) -> Run | Hold: ...

    def batch_prefill_done(self, ticket: int) -> None: ...

    def first_token_measured(self, seconds: float) -> GiveWay | None: ...

    def inter_token_measured(self, seconds: float) -> GiveWay | None: ...

    def interactive_finished(self, engine_first_token_s: float) -> None: ...

    def gave_way(self, job_id: str) -> Requeue: ...
