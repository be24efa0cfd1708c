"""The stream-reading protocol without I/O: what to read next, and what it means.

Pub/sub is at-most-once: a subscriber that joins late or reconnects misses messages.
So every event is also appended to a Redis list whose index is the sequence number
(see ``schemas.stream_log``). A reader subscribes first, then replays the list from
the sequence it wants, then follows pub/sub; any gap or silence is filled from the
list, and a long silence also asks the job's row whether it already ended. A row that
says so is taken only once the log, read again, has nothing new: the job may have
streamed its whole answer between the silent read of the log and the row's (its
events are in the log before its row ends). Events come out exactly once, in order,
ending with the terminal event.

:class:`StreamReader` holds all of that as a state machine the way h11 does for HTTP:
a driver asks :meth:`StreamReader.next_action` what to do (listen, read the log, read
the row), does it, and hands the outcome back. The sync and asyncio drivers in
``producer.streams`` do only the I/O; everything decided here is tested without Redis.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from enum import Enum
from typing import Any

from pydantic import ValidationError

from schemas.boundary import broker_error
from schemas.errors import JobTimeout
from schemas.events import AnyEvent, ErrorEvent, TerminalEvent, is_terminal, parse_event
from schemas.timeouts import DEFAULT_TIMEOUTS

# Not settings (the idle polls and the reconnect delay): they pace the reading protocol,
# and events come by pub/sub at once whatever they are.
# With no pub/sub message for this long, re-read the log (covers a missed
# message) and ask the database whether the job already ended.
IDLE_POLL_S = 1.0
# Each silence in a row doubles that wait, up to this: a stream whose job waits in a
# long batch queue would otherwise read the log and the row every second for minutes,
# and a gateway holding hundreds of such streams spends its host's CPU on them. Any
# event sets the wait back to IDLE_POLL_S; pub/sub still delivers at once.
IDLE_POLL_MAX_S = 8.0
# A reader rides out a Redis restart or failover of up to this long, unless told
# (``settings.timeouts.stream_reconnect_s``).
RECONNECT_BUDGET_S = DEFAULT_TIMEOUTS.stream_reconnect_s
RECONNECT_DELAY_S = 0.5


@dataclass(frozen=True)
class Listen:
    """Wait up to ``timeout`` seconds for one pub/sub message; hand it (or None) to
    :meth:`StreamReader.receive_message`."""

    timeout: float


@dataclass(frozen=True)
class ReadLog:
    """Read the replay log from index ``start`` to its end; hand the entries to
    :meth:`StreamReader.receive_log`."""

    start: int


@dataclass(frozen=True)
class ReadRow:
    """Ask the job's row for its outcome as event ``seq``; hand it (or None while the
    job runs) to :meth:`StreamReader.receive_row`."""

    seq: int


Action = Listen | ReadLog | ReadRow


class _Phase(Enum):
    SUBSCRIBING = "subscribing"  # waiting for the subscription to be confirmed
    REPLAY = "replay"  # the log must be read from next_seq
    FOLLOW = "follow"  # listening to pub/sub
    ROW = "row"  # the row must be asked whether the job ended
    CONFIRM = "confirm"  # the row says it ended: the log is read again before that counts
    DONE = "done"  # the terminal event was handed out


class StreamReader:
    """One reader's place in a job's stream, kept across reconnects; no I/O.

    ``from_seq`` is the first event wanted. ``timeout`` (seconds from now) makes
    :meth:`next_action` raise ``JobTimeout`` once it is spent; ``clock`` is the
    monotonic clock deadlines and outages are measured with. With
    ``confirmed_before_job`` the first connection is already subscribed, since before
    the job's message was sent (a reconnect subscribes afresh).
    """

    def __init__(
        self,
        job_id: str,
        *,
        from_seq: int = 0,
        timeout: float | None = None,
        clock: Callable[[], float] = time.monotonic,
        confirmed_before_job: bool = False,
        reconnect_budget_s: float = RECONNECT_BUDGET_S,
    ) -> None:
        if confirmed_before_job and from_seq:
            raise ValueError("a subscription from before the job reads from its first event")
        self.job_id = job_id
        self.next_seq = from_seq
        self._clock = clock
        self._deadline = None if timeout is None else clock() + timeout
        # Nothing can precede a subscription Redis confirmed before the job's message
        # was sent: no confirmation to wait for, no log to read first.
        self._phase = _Phase.FOLLOW if confirmed_before_job else _Phase.SUBSCRIBING
        self._ask_row_after_replay = False
        self._row_outcome: TerminalEvent | None = None
        """The row's outcome, while the log is read again before it is taken."""
        self._outage_since: float | None = None
        self._reconnect_budget_s = reconnect_budget_s
        self._silences = 0
        """Listens in a row that brought nothing."""

    @property
    def finished(self) -> bool:
        """True once the terminal event was handed out."""
        return self._phase is _Phase.DONE

    def next_action(self) -> Action | None:
        """What the driver does next; None once the stream is over.

        Raises ``JobTimeout`` instead of a ``Listen`` once the timeout is spent.
        """
        match self._phase:
            case _Phase.DONE:
                return None
            case _Phase.REPLAY | _Phase.CONFIRM:
                return ReadLog(self.next_seq)
            case _Phase.ROW:
                return ReadRow(self.next_seq)
            case _Phase.SUBSCRIBING | _Phase.FOLLOW:
                return Listen(self._listen_timeout())

    def receive_message(self, message: dict[str, Any] | None) -> list[AnyEvent]:
        """Take what one ``Listen`` brought: a pub/sub message dict, or None for silence.

        While subscribing, only the confirmation counts: the log is read after it, or an
        event published in between would be in neither. Then the next event is taken
        as it comes; silence, a gap or an unreadable message sends the reader to the log
        (and silence, after the log, to the row).
        """
        if self._phase is _Phase.SUBSCRIBING:
            if message is not None and message.get("type") == "subscribe":
                self._outage_since = None
                self._phase = _Phase.REPLAY
            return []
        self._expect(_Phase.FOLLOW)
        found = _message_event(message)
        self._silences = self._silences + 1 if found is None else 0
        if found is not None and self.wants(found[0]):
            return self._take([found[1]], found[0])
        if found is None or found[0] > self.next_seq:
            self._phase = _Phase.REPLAY
            self._ask_row_after_replay = found is None
        return []

    def receive_log(self, entries: Iterable[str | bytes]) -> list[AnyEvent]:
        """Take the replay log's entries from the ``ReadLog`` position on. Read to
        confirm the row's outcome, a log with nothing new ends the stream with it."""
        if self._phase is _Phase.CONFIRM:
            return self._confirm(entries)
        self._expect(_Phase.REPLAY)
        events = self._take(entries, self.next_seq)
        if not self.finished:
            self._phase = _Phase.ROW if self._ask_row_after_replay else _Phase.FOLLOW
        self._ask_row_after_replay = False
        return events

    def receive_row(self, terminal: TerminalEvent | None) -> list[AnyEvent]:
        """Take the row's outcome: None goes on listening; a terminal event is held
        while the log is read once more (``ReadLog``), and ends the stream only if the
        log has nothing new."""
        self._expect(_Phase.ROW)
        if terminal is None:
            self._phase = _Phase.FOLLOW
            return []
        self._row_outcome = terminal
        self._phase = _Phase.CONFIRM
        return []

    def _confirm(self, entries: Iterable[str | bytes]) -> list[AnyEvent]:
        # A job writes its events to the log before its row ends, so a log with events
        # past the reader has the answer the row summarises: they go out, and the stream
        # goes on to its own terminal event. An empty one (expired, lost) leaves the row.
        terminal, self._row_outcome = self._row_outcome, None
        events = self._take(entries, self.next_seq)
        if events:
            if not self.finished:
                self._phase = _Phase.FOLLOW
            return events
        assert terminal is not None  # set with the phase
        self.next_seq += 1
        self._phase = _Phase.DONE
        return [terminal]

    def connection_lost(self, exc: BaseException) -> float:
        """Redis went away: seconds to wait before subscribing again from ``next_seq``.

        Raises ``JobTimeout`` when the timeout is spent, ``BrokerUnavailable`` once
        Redis has been away longer than ``reconnect_budget_s``.
        """
        self._check_deadline()
        now = self._clock()
        if self._outage_since is None:
            self._outage_since = now
        if now - self._outage_since > self._reconnect_budget_s:
            raise broker_error(exc, doing=f"follow the stream of job {self.job_id}") from exc
        if not self.finished:
            self._phase = _Phase.SUBSCRIBING
            self._ask_row_after_replay = False
            self._row_outcome = None  # asked again after the next silence
        return RECONNECT_DELAY_S

    def wants(self, seq: int) -> bool:
        """True if ``seq`` is the next event the reader needs."""
        return seq == self.next_seq and not self.finished

    def _take(self, raw_events: Iterable[str | bytes], first_seq: int) -> list[AnyEvent]:
        # Consecutive raw events from first_seq; what was already handed out is dropped.
        accepted: list[AnyEvent] = []
        for offset, raw in enumerate(raw_events):
            if not self.wants(first_seq + offset):
                continue
            event = _decode(raw, first_seq + offset)
            accepted.append(event)
            self.next_seq += 1
            if is_terminal(event):
                self._phase = _Phase.DONE
        if accepted:
            self._silences = 0  # an event, from the log or live: the job is streaming
        return accepted

    def _listen_timeout(self) -> float:
        self._check_deadline()
        idle: float = min(IDLE_POLL_MAX_S, IDLE_POLL_S * 2.0 ** min(self._silences, 16))
        if self._deadline is None:
            return idle
        return max(0.0, min(idle, self._deadline - self._clock()))

    def _check_deadline(self) -> None:
        if self._deadline is not None and self._clock() >= self._deadline:
            raise JobTimeout(f"job {self.job_id} did not finish in time; it keeps running")

    def _expect(self, phase: _Phase) -> None:
        if self._phase is not phase:
            raise RuntimeError(
                f"stream reader got input for {phase.value} while {self._phase.value}"
            )


def _decode(raw: str | bytes, seq: int) -> AnyEvent:
    try:
        return parse_event(raw)
    except ValidationError:
        return ErrorEvent(seq=seq, message=f"stream event {seq} is corrupt")


def _message_event(message: dict[str, Any] | None) -> tuple[int, Any] | None:
    # (seq, raw) of a pub/sub event message; None for silence, other message kinds and
    # anything unreadable (the log has the event in a readable form, or says it is corrupt).
    if message is None or message.get("type") != "message":
        return None
    try:
        return parse_event(message["data"]).seq, message["data"]
    except ValidationError:
        return None
