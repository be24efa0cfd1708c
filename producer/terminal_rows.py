"""Job rows asked for by silent streams, read together, off the event loop.

A stream reader that hears nothing for a while asks the job's row whether the job
ended (``producer.stream_protocol``: its events may be gone, an expired log or a Redis
that lost them). In a gateway, hundreds of streams wait on queued batch jobs at once,
each asking every few seconds: one query each, on the event loop, held up every other
stream's tokens while it ran. Here an ask waits on a future; the asks that come within
``window_s`` of the first are answered by one read of their rows
(``producer.jobs.ended_rows``), in a thread.
"""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Collection

from schemas.errors import JobNotFound
from schemas.events import TerminalEvent
from schemas.tables import Job

# Asks are answered at most this long after they come: the reader asks only after
# seconds of silence, so a quarter of a second more goes unnoticed, and every stream
# that falls silent within it shares one query.
ASK_WINDOW_S = 0.25

EndedRows = Callable[[Collection[str]], tuple[dict[str, Job], set[str]]]
"""``producer.jobs.ended_rows`` with its sessions: the rows of the jobs that ended, and
the ids that have a row."""
RowEvent = Callable[[Job, int], TerminalEvent | None]

_Ask = tuple[str, int, "asyncio.Future[TerminalEvent | None]"]


class TerminalRows:
    """The terminal events job rows stand for, read in batches. One per event loop."""

    def __init__(
        self, read: EndedRows, event_of: RowEvent, *, window_s: float = ASK_WINDOW_S
    ) -> None:
        self._read = read
        self._event_of = event_of
        self._window_s = window_s
        self._asks: list[_Ask] = []
        self._flush: asyncio.TimerHandle | None = None
        self._reads: set[asyncio.Task[None]] = set()
        self._loop: asyncio.AbstractEventLoop | None = None
        self.reads = 0
        """Reads of the database so far (one per batch of asks)."""

    async def terminal(self, job_id: str, seq: int) -> TerminalEvent | None:
        """The outcome ``job_id``'s row records, as event ``seq``; None while the job
        runs. Raises ``JobNotFound`` for a job with no row, and ``DatabaseUnavailable``."""
        loop = asyncio.get_running_loop()
        if loop is not self._loop:  # asks left by a loop that ended are never answered
            self._loop, self._asks, self._flush = loop, [], None
        answer: asyncio.Future[TerminalEvent | None] = loop.create_future()
        self._asks.append((job_id, seq, answer))
        if self._flush is None:
            self._flush = loop.call_later(self._window_s, self._start_read)
        return await answer

    def _start_read(self) -> None:
        asks, self._asks, self._flush = self._asks, [], None
        task = asyncio.get_running_loop().create_task(self._answer(asks))
        self._reads.add(task)  # held until done: the loop keeps only a weak reference
        task.add_done_callback(self._reads.discard)

    async def _answer(self, asks: list[_Ask]) -> None:
        waiting = [ask for ask in asks if not ask[2].done()]  # a reader that left
        if not waiting:
            return
        self.reads += 1
        try:
            ended, found = await asyncio.to_thread(self._read, [job_id for job_id, _, _ in waiting])
        except Exception as exc:  # noqa: BLE001 - every ask of the read gets its error
            for _job_id, _seq, answer in waiting:
                if not answer.done():
                    answer.set_exception(exc)
            return
        for job_id, seq, answer in waiting:
            if answer.done():
                continue
            if job_id not in found:
                answer.set_exception(JobNotFound(f"no job with id {job_id}"))
                continue
            row = ended.get(job_id)
            try:
                answer.set_result(None if row is None else self._event_of(row, seq))
            except Exception as exc:  # noqa: BLE001 - a row it cannot read is this ask's error
                answer.set_exception(exc)

    async def aclose(self) -> None:
        """Answer nothing more: asks not yet read are cancelled, reads under way end."""
        if self._flush is not None:
            self._flush.cancel()
            self._flush = None
        for _job_id, _seq, answer in self._asks:
            answer.cancel()
        self._asks = []
        if self._reads:
            await asyncio.gather(*self._reads, return_exceptions=True)
