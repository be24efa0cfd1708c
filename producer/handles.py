"""What a job handle knows and decides without I/O, shared by the synchronous
:class:`~producer.client.JobHandle` and the asyncio
:class:`~producer.aio.AsyncJobHandle`.

The two handles differ only in how they wait (a generator or an async generator);
which subscription a read may take, what an event means to the caller (a text chunk,
an error, the end) and the result built from the terminal event are decided here once.
"""

from __future__ import annotations

from dataclasses import KW_ONLY, dataclass, field
from typing import Generic, TypeVar

from producer.streams import Event
from schemas.errors import job_ended
from schemas.events import ErrorEvent, TerminalEvent, TokenEvent, TokenLogprob, is_terminal
from schemas.jobs import JobResult, JobStatus
from schemas.queues import Priority, Tier

ClientT = TypeVar("ClientT")
"""The client the handle reads, cancels and gives subscriptions back through."""
Subscription = TypeVar("Subscription")
"""The pub/sub connection a handle's first read may take (sync or asyncio)."""


@dataclass(eq=False, repr=False)
class HandleCore(Generic[ClientT, Subscription]):
    """One submitted job's identity, the client it goes through, its subscription sent
    ahead, and its terminal event once a read has seen it."""

    client: ClientT
    job_id: str
    tier: Tier
    """The tier that serves the job."""
    priority: Priority
    _: KW_ONLY
    routed_tier: Tier | None = None
    """For ``auto``: the tier the classifier chose (``tier`` differs where no worker
    served it); None for an explicit tier."""
    early: Subscription | None = None
    """The subscription ``submit(subscribe=True)`` made, until a read takes it."""
    _terminal: TerminalEvent | None = field(default=None, init=False)

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.job_id!r}, tier={self.tier}, priority={self.priority})"

    def _take_early(self, from_seq: int) -> tuple[Subscription | None, Subscription | None]:
        """``(to_read_with, to_give_back)``: the subscription sent ahead joined for the
        first event, so a read from a later one gives it back instead."""
        early, self.early = self.early, None
        if early is not None and from_seq:
            return None, early
        return early, None

    def _take_unread(self) -> Subscription | None:
        """The subscription sent ahead that no read took (to give back on close)."""
        early, self.early = self.early, None
        return early

    def _seen(self, event: Event) -> Event:
        """``event``, remembered when it ends the job."""
        if is_terminal(event):
            self._terminal = event
        return event

    def _chunk(self, event: Event) -> str | None:
        """A token event's text, None for other events; raises ``JobFailed`` for an
        error event."""
        if isinstance(event, TokenEvent):
            return event.text
        if isinstance(event, ErrorEvent):
            raise job_ended(self.job_id, event.message, event.status)
        return None

    @property
    def _ended(self) -> bool:
        return self._terminal is not None

    def _result(self, logprobs: dict[int, list[TokenLogprob]]) -> JobResult:
        """The result of the terminal event a read has seen; raises ``JobFailed``."""
        assert self._terminal is not None
        return result_from_terminal(
            self.job_id, self.tier, self.priority, self._terminal, logprobs=logprobs
        )


def with_logprobs(
    logprobs: dict[int, list[TokenLogprob]], event: Event
) -> dict[int, list[TokenLogprob]]:
    """``logprobs`` (by choice) extended by a token event's own, if it has any."""
    if isinstance(event, TokenEvent) and event.logprobs is not None:
        logprobs.setdefault(event.index, []).extend(event.logprobs)
    return logprobs


def result_from_terminal(
    job_id: str,
    tier: Tier,
    priority: Priority,
    terminal: TerminalEvent,
    *,
    logprobs: dict[int, list[TokenLogprob]] | None = None,
) -> JobResult:
    """The caller's view of a terminal event; raises ``JobFailed`` for an error event.

    ``logprobs``: those of the job's token events, by choice, read on the way to it."""
    if isinstance(terminal, ErrorEvent):
        raise job_ended(job_id, terminal.message, terminal.status)
    logprobs = logprobs or {}
    choices = None
    if terminal.choices is not None:
        choices = [
            choice.model_copy(update={"logprobs": logprobs.get(choice.index)})
            for choice in terminal.choices
        ]
    return JobResult(
        job_id=job_id,
        status=JobStatus.DONE,
        text=terminal.text,
        tier=tier,
        priority=priority,
        usage=terminal.usage,
        timings=terminal.timings,
        worker_id=terminal.worker_id,
        finish_reason=terminal.finish_reason,
        logprobs=logprobs.get(0),
        choices=choices,
    )
