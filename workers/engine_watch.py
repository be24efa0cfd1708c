"""Stop a worker whose engine died while it had nothing to run.

A dying request notices a dead engine (``EngineDead`` stops the worker), but an idle
worker would not: it would stay registered and warm, take the next message and spend
one of that job's attempts finding out. The watch looks every second instead, so the
worker leaves (and its supervisor restarts it) before it takes more work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from workers.background import BackgroundLoop

log = logging.getLogger(__name__)

# Not a setting: an engine death is also seen by the job that meets it; this poll
# only stops an idle worker sooner.
WATCH_INTERVAL_S = 1.0


class EngineWatch(BackgroundLoop):
    """Calls ``on_dead`` once, the first time ``alive()`` says the engine is gone."""

    thread_name = "llmq-engine-watch"

    def __init__(
        self,
        alive: Callable[[], bool],
        on_dead: Callable[[], None],
        *,
        interval_s: float = WATCH_INTERVAL_S,
    ) -> None:
        super().__init__()
        self._alive = alive
        self._on_dead = on_dead
        self._interval_s = interval_s

    def run(self) -> None:
        while not self._stopping.wait(self._interval_s):
            try:
                if self._alive():
                    continue
            except Exception:
                log.exception("could not tell whether the engine is alive; looking again")
                continue
            log.error("the engine process is gone")
            self._on_dead()
            return
