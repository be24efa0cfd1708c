"""What a person sees while a worker starts: a few lines, the engine's own logs in a file.

vLLM logs a screenful at start-up, from this process and from the engine processes it
starts. In quiet mode file descriptors 1 and 2 point at a log file, so everything
written there, by any process started afterwards too, lands in the file; llmq's own
lines go to a copy of the terminal kept aside.
"""

from __future__ import annotations

import contextlib
import os
import re
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import IO

from rich.console import Console

# Lines vLLM's CPU build prints that nobody running llmq can act on: named once, after
# the engine is ready, if the log holds them.
EXPLAINED_NOTES: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"Triton is installed, but doesn't include|Triton is not installed"), "no Triton"),
    (re.compile(r"(libtcmalloc|libiomp) is not found in LD_PRELOAD"), "tcmalloc/iomp preload"),
    (re.compile(r"Model Runner V2 requires Triton"), "V1 model runner"),
)
NOTES_WHY = (
    "expected on vLLM's CPU build and harmless: it uses its own CPU kernels without Triton, "
    "and the preloads are an optional allocator tweak"
)

# Not a setting: how often a start-up line redraws, a display choice.
PHASE_REFRESH_S = 0.25


def default_log_path(log_dir: Path, name: str) -> Path:
    """``<log_dir>/<name>.log``, creating the folder."""
    log_dir.mkdir(parents=True, exist_ok=True)
    return log_dir / f"{name}.log"


@contextlib.contextmanager
def output_to_file(path: Path) -> Iterator[IO[str]]:
    """Point stdout and stderr (the descriptors, so child processes too) at ``path``.

    Yields a text stream on the terminal for llmq's own lines; restores both
    descriptors on exit, so an error raised inside is reported on the terminal.
    """
    sys.stdout.flush()
    sys.stderr.flush()
    saved_out, saved_err = os.dup(1), os.dup(2)
    log_fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC | os.O_APPEND, 0o644)
    terminal = os.fdopen(os.dup(saved_err), "w", buffering=1)
    try:
        os.dup2(log_fd, 1)
        os.dup2(log_fd, 2)
        yield terminal
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved_out, 1)
        os.dup2(saved_err, 2)
        for fd in (saved_out, saved_err, log_fd):
            os.close(fd)
        terminal.close()


def explain_notes(log_path: Path) -> str | None:
    """One sentence on the known harmless warnings in ``log_path``; None if it has none."""
    try:
        text = log_path.read_text(errors="replace")
    except OSError:
        return None
    found = [name for pattern, name in EXPLAINED_NOTES if pattern.search(text)]
    if not found:
        return None
    return f"the log's warnings ({', '.join(found)}) are {NOTES_WHY}"


class StartupView:
    """A prefix, a few plain lines, and one live line while the engine warms.

    On a terminal the live line redraws in place (elapsed seconds and phase); anywhere
    else each new phase is one plain line, so a log collector sees the same story.
    """

    def __init__(self, stream: IO[str], *, prefix: str) -> None:
        self._console = Console(file=stream, highlight=False, soft_wrap=True)
        self._prefix = prefix
        self._phase = "loading"
        self._what = "engine"
        self._started = time.monotonic()
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def say(self, message: str) -> None:
        self._console.print(f"{self._prefix}: {message}", markup=False)

    def warming(self, what: str) -> None:
        """Start the live line: ``what`` is being warmed (shown with the phase)."""
        self._started = time.monotonic()
        self._what = what
        if self._console.is_terminal:
            self._thread = threading.Thread(target=self._draw, name="llmq-startup", daemon=True)
            self._thread.start()
        else:
            self.say(f"{what}: {self._phase}")

    def phase(self, phase: str) -> None:
        with self._lock:
            changed = phase != self._phase
            self._phase = phase
        if changed and self._thread is None:
            self.say(f"{self._what}: {phase}")

    def done(self) -> float:
        """End the live line; return the seconds it took."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
            self._thread = None
        return time.monotonic() - self._started

    def _draw(self) -> None:
        first = f"{self._prefix}: {self._what}: {self._phase} (0 s)"
        with self._console.status(first, spinner="dots") as status:
            while not self._stop.wait(PHASE_REFRESH_S):
                with self._lock:
                    phase = self._phase
                elapsed = time.monotonic() - self._started
                status.update(f"{self._prefix}: {self._what}: {phase} ({elapsed:.0f} s)")
