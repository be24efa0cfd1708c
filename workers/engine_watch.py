"""Stop a worker whose engine died while it had nothing to run.

A dying request notices a dead engine (``EngineDead`` stops the worker), but an idle
worker would not: it would stay registered and warm, take the next message and spend
one of that job's attempts finding out. The watch looks every second instead, so the
worker leaves (and its supervisor restarts it) before it takes more work.
"""

from __future__ import annotations

import logging
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass

from workers.background import BackgroundLoop

log = logging.getLogger(__name__)

# Not a setting: an engine death is also seen by the job that meets it; this poll
# only stops an idle worker sooner.
WATCH_INTERVAL_S = 1.0


@dataclass(eq=False)
class EngineWatch(BackgroundLoop):
    """Calls ``on_dead`` once, the first time ``alive()`` says the engine is gone."""

    thread_name = "llmq-engine-watch"

    alive: Callable[[], bool]
    on_dead: Callable[[], None]
    _: KW_ONLY
    interval_s: float = WATCH_INTERVAL_S

    def __post_init__(self) -> None:
        super().__init__()

    def run(self) -> None:
        while not self._stopping.wait(self.interval_s):
            try:
                if self.alive():
                    continue
            except Exception:
                log.exception("could not tell whether the engine is alive; looking again")
                continue
            log.error("the engine process is gone")
            self.on_dead()
            return
