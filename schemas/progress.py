"""The one progress display of every long command, on stderr.

Two shapes, one class (:class:`ProgressBar`):

* a **bar** where the work is counted:
  ``label [#########.....................] 12/40 30%, 2.1/s, ETA 13 s``;
* a **phase line** where it is not: ``label: loading weights (12 s)``.

On a terminal the line is redrawn in place (at most ten times a second; a phase line
also ticks once a second by itself, so its elapsed time moves while one step runs).
Anywhere else (a log file, CI, a pipe) a bar prints a plain line each tenth of the way
and a phase line one line per phase, so logs stay short and readable. Standard output
is never written: a command's JSON there stays clean.

Imports nothing of llmq's: producer, workers and bench all use it.
"""

from __future__ import annotations

import shutil
import sys
import threading
import time
from collections.abc import Callable, Iterable, Iterator
from types import TracebackType
from typing import TextIO, TypeVar

BAR_WIDTH = 30
# Not settings (REDRAW_S, TICK_S): terminal drawing, a display choice.
# A terminal line is redrawn at most this often: updates from a tight loop stay cheap.
REDRAW_S = 0.1
# How often a phase line redraws itself on a terminal, so its elapsed time moves.
TICK_S = 1.0
CLEAR_TO_END = "\x1b[K"

T = TypeVar("T")

# A terminal has one line to redraw: bars open on it, innermost last. Only the innermost
# draws; an outer one (a step around a step) keeps its last line and resumes when the
# inner one ends. Module state because the terminal itself is process-wide.
_on_terminal: list[ProgressBar] = []
_terminal_lock = threading.RLock()


def format_duration(seconds: float) -> str:
    """``4.2 s``, ``42 s``, ``3 min 05 s``, ``1 h 02 min``."""
    seconds = max(seconds, 0.0)
    if seconds < 10:
        return f"{seconds:.1f} s"
    if seconds < 60:
        return f"{seconds:.0f} s"
    if seconds < 3600:
        minutes, rest = divmod(round(seconds), 60)
        return f"{minutes} min {rest:02d} s"
    hours, minutes = divmod(round(seconds / 60), 60)
    return f"{hours} h {minutes:02d} min"


def format_bytes(count: float) -> str:
    """``512 B``, ``12.0 KiB``, ``250.3 MiB``, ``1.2 GiB``."""
    value = float(count)
    for unit in ("B", "KiB", "MiB", "GiB"):
        if abs(value) < 1024 or unit == "GiB":
            return f"{value:.0f} {unit}" if unit == "B" else f"{value:.1f} {unit}"
        value /= 1024
    raise AssertionError("unreachable")


def _rate(per_s: float, unit: str) -> str:
    if unit == "B":
        return f"{format_bytes(per_s)}/s"
    shown = f"{per_s:.1f}" if per_s < 100 else f"{per_s:.0f}"
    return f"{shown} {unit}/s" if unit else f"{shown}/s"


def _isatty(stream: TextIO) -> bool:
    try:
        return stream.isatty()
    except (AttributeError, ValueError):  # a closed or fake stream
        return False


class ProgressBar:
    """Progress of one long step: a bar when ``total`` is known, else a phase line.

    ``update(done)`` / ``advance()`` move a bar, ``phase(text)`` names what runs now,
    ``say(line)`` prints a line without breaking the bar, ``close()`` (or the end of a
    ``with`` block) ends it with the time it took. It is also a ``(done, total)``
    callback, the shape ``on_progress`` parameters take. Thread-safe. With
    ``enabled=False`` it prints nothing at all.

    ``stream`` defaults to ``sys.stderr`` (looked up when written, so a redirected
    stderr is honoured); ``tty`` overrides whether it is treated as a terminal;
    ``initial`` is work already done before this run (a resumed batch), which the rate
    and ETA leave out.
    """

    def __init__(
        self,
        label: str,
        total: int | None = None,
        *,
        unit: str = "",
        initial: int = 0,
        stream: TextIO | None = None,
        enabled: bool = True,
        tty: bool | None = None,
        width: int = BAR_WIDTH,
        clock: Callable[[], float] = time.monotonic,
        ticker: bool | None = None,
    ) -> None:
        self.label = label
        self.total = total
        self.unit = unit
        self.done = initial
        self.note = ""
        self.enabled = enabled
        self._stream = stream
        self._tty = _isatty(self.stream) if tty is None else tty
        self._width = width
        self._clock = clock
        self._started = self._phase_started = clock()
        self._initial = initial
        self._last_draw = float("-inf")
        self._decile = 0
        self._on_screen = False
        self._closed = False
        self._lock = threading.RLock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        if enabled and self._tty:
            with _terminal_lock:
                for outer in _on_terminal:
                    if outer.stream is self.stream:
                        outer._leave_line()
                _on_terminal.append(self)
        if enabled and total is None:  # a step nobody counts: say it started
            if self._tty:
                self._draw()
            else:
                self._line(f"{label}...")
        tick = total is None if ticker is None else ticker
        if enabled and self._tty and tick:
            self._thread = threading.Thread(target=self._tick, name="llmq-progress", daemon=True)
            self._thread.start()

    # ------------------------------------------------------------ what callers use

    @property
    def stream(self) -> TextIO:
        return self._stream if self._stream is not None else sys.stderr

    @property
    def elapsed_s(self) -> float:
        return self._clock() - self._started

    @property
    def finished(self) -> bool:
        return self._closed

    def update(self, done: int, *, note: str | None = None) -> None:
        """Set how much is done (absolute); a bar that reaches its total ends itself."""
        with self._lock:
            if self._closed:
                return
            self.done = done
            if note is not None:
                self.note = note
            if self.total is not None and done >= self.total:
                self.close()
                return
            self._show()

    def advance(self, step: int = 1, *, note: str | None = None) -> None:
        """Add ``step`` to what is done."""
        with self._lock:
            self.update(self.done + step, note=note)

    def track(self, items: Iterable[T]) -> Iterator[T]:
        """Yield ``items``, one step after each; the bar ends with them."""
        with self:
            for item in items:
                yield item
                self.advance()

    def __call__(self, done: int, total: int) -> None:
        """The ``on_progress(done, total)`` callback shape."""
        with self._lock:
            self.total = total
            self.update(done)

    def phase(self, text: str) -> None:
        """Name the step running now: a new line where stderr is not a terminal."""
        with self._lock:
            if self._closed or text == self.note:
                return
            self.note = text
            self._phase_started = self._clock()
            if not self.enabled:
                return
            if self._tty:
                self._draw()
            elif self.total is None:
                self._line(f"{self.label}: {text} (at {format_duration(self.elapsed_s)})")

    def say(self, line: str) -> None:
        """Print ``line`` on its own line, above the bar."""
        with self._lock:
            if not self.enabled:
                return
            with _terminal_lock:
                if self._tty and self._on_screen:
                    self._write("\r" + CLEAR_TO_END + line + "\n")
                    self._on_screen = False
                    if not self._closed:
                        self._draw()
                else:
                    self._line(line)

    def close(self, *, ok: bool = True) -> None:
        """End the line, with the time it took (``ok=False``: it stopped early)."""
        with self._lock:
            if self._closed:
                return
            self._closed = True
            # The ticker ends by itself within a tick (it draws nothing once closed);
            # joining it here could wait on the lock a caller of update() still holds.
            self._stop.set()
            if not self.enabled:
                return
            text = self.render(final=True, ok=ok)
            if self._tty:
                with _terminal_lock:
                    self._write("\r" + self._fit(text) + CLEAR_TO_END + "\n")
                    self._on_screen = False
                    if self in _on_terminal:
                        _on_terminal.remove(self)
            else:
                self._line(text)

    def __enter__(self) -> ProgressBar:
        return self

    def __exit__(
        self,
        kind: type[BaseException] | None,
        _value: BaseException | None,
        _traceback: TracebackType | None,
    ) -> None:
        self.close(ok=kind is None)

    # ------------------------------------------------------------ drawing

    def render(self, *, final: bool = False, ok: bool = True) -> str:
        """The line as it would be drawn now (``final``: the closing line)."""
        elapsed = self.elapsed_s
        if self.total is None:
            if final:
                how = "done in" if ok else "stopped after"
                return f"{self.label}: {how} {format_duration(elapsed)}"
            took = format_duration(self._clock() - self._phase_started)
            return f"{self.label}: {self.note} ({took})" if self.note else f"{self.label} ({took})"
        total = max(self.total, 0)
        shown = min(max(self.done, 0), total)
        filled = self._width * shown // total if total else self._width
        parts = [
            f"{self.label} [{'#' * filled}{'.' * (self._width - filled)}] "
            f"{self._count(self.done)}/{self._count(total)}"
            f"{'' if self.unit in ('', 'B') else ' ' + self.unit} "
            f"{100 * shown // total if total else 100}%"
        ]
        counted = self.done - self._initial
        if counted > 0 and elapsed > 0:
            parts.append(_rate(counted / elapsed, self.unit))
        if final or self.done >= total:
            parts.append(f"{'in' if ok else 'stopped after'} {format_duration(elapsed)}")
        elif counted > 0 and elapsed > 0:
            parts.append(f"ETA {format_duration((total - self.done) * elapsed / counted)}")
        if self.note:
            parts.append(self.note)
        return ", ".join(parts)

    def _count(self, value: int) -> str:
        return format_bytes(value) if self.unit == "B" else str(value)

    def _show(self) -> None:
        if not self.enabled:
            return
        if self._tty:
            if self._clock() - self._last_draw >= REDRAW_S:
                self._draw()
        elif self.total:
            decile = 10 * self.done // self.total
            if decile > self._decile:
                self._decile = decile
                self._line(self.render())

    def _draw(self) -> None:
        with _terminal_lock:
            if any(inner.stream is self.stream for inner in self._inner()):
                return  # a step inside this one has the line
            self._last_draw = self._clock()
            self._write("\r" + self._fit(self.render()) + CLEAR_TO_END)
            self._on_screen = True

    def _inner(self) -> list[ProgressBar]:
        if self not in _on_terminal:
            return []
        return _on_terminal[_on_terminal.index(self) + 1 :]

    def _leave_line(self) -> None:
        # A step inside this one starts: keep this line as it was and go to the next.
        # Called under the terminal lock only (never this bar's: a ticking bar holds its
        # own lock while it waits for the terminal's).
        if self._on_screen:
            self._write("\n")
            self._on_screen = False

    def _fit(self, text: str) -> str:
        # A line wider than the terminal wraps, and "\r" then redraws only its tail.
        columns = shutil.get_terminal_size((120, 24)).columns - 1
        return text if len(text) <= columns else text[: max(columns - 1, 10)] + "…"

    def _line(self, text: str) -> None:
        self._write(text + "\n")

    def _write(self, text: str) -> None:
        try:
            self.stream.write(text)
            self.stream.flush()
        except (OSError, ValueError):  # stderr closed under us: progress is not worth a crash
            pass

    def _tick(self) -> None:
        while not self._stop.wait(TICK_S):
            with self._lock:
                if not self._closed:
                    self._draw()
