"""Workers announce themselves in Redis: tier, warm or not, load (``schemas.registry``)."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import redis

from schemas.queues import Tier, worker_key
from schemas.registry import WorkerEntry, write_entry
from schemas.timeouts import DEFAULT_TIMEOUTS
from workers.background import BackgroundLoop

log = logging.getLogger(__name__)

# The defaults of ``settings.timeouts.heartbeat_s`` and ``registry_expiry_s``: a worker
# that misses a few heartbeats disappears from the registry by itself.
HEARTBEAT_S = DEFAULT_TIMEOUTS.heartbeat_s
EXPIRY_S = DEFAULT_TIMEOUTS.registry_expiry_s


@dataclass(frozen=True)
class EngineTiming:
    """A lone request's first token and decode step, as the warm engine ran them."""

    first_token_s: float
    step_s: float

    @property
    def step_share(self) -> float:
        """The decode step as a share of the first token."""
        return self.step_s / self.first_token_s if self.first_token_s > 0 else 0.0


class WorkerRegistration(BackgroundLoop):
    """This worker's entry in the registry, refreshed by a heartbeat thread."""

    thread_name = "llmq-heartbeat"

    def __init__(
        self,
        client: redis.Redis,
        *,
        worker_id: str,
        tier: Tier,
        concurrency: int,
        in_flight: Callable[[], int] = lambda: 0,
        heartbeat_s: float = HEARTBEAT_S,
        expiry_s: int = EXPIRY_S,
    ) -> None:
        super().__init__()
        self._redis = client
        self._heartbeat_s = heartbeat_s
        self._expiry_s = expiry_s
        self._key = worker_key(worker_id)
        self._in_flight = in_flight
        self._stats: Callable[[], dict[str, Any]] | None = None
        # None until told: a worker that reports no held jobs must really hold none.
        self._held: Callable[[], list[str]] | None = None
        self._entry = WorkerEntry(
            worker_id=worker_id, tier=tier, concurrency=concurrency, started_at=time.time()
        )

    def track(
        self,
        in_flight: Callable[[], int],
        stats: Callable[[], dict[str, Any]] | None = None,
        *,
        held: Callable[[], list[str]] | None = None,
    ) -> None:
        """Report load from ``in_flight``, figures from ``stats`` (once the engine exists)
        and the ids of the jobs held from ``held`` (``workers.held_jobs``)."""
        self._in_flight = in_flight
        self._stats = stats
        self._held = held

    def announce(self) -> None:
        """Publish the entry (cold) and start the heartbeat.

        The id joins the known workers with every write, so that readers find the
        entry and, if this worker dies, a reaper notices and recovers even a message it
        popped but never recorded.
        """
        self._write()
        self.start()

    def set_phase(self, phase: str) -> None:
        """Say what the warming worker is doing now (``schemas.registry.WARMING_PHASES``)."""
        self._entry = self._entry.model_copy(update={"phase": phase})
        self._write()

    def mark_warm(self, timing: EngineTiming) -> None:
        """Say this worker's engine is warm, and how fast it ran a lone request; from
        now on it takes work."""
        update = {
            "warm": True,
            "warm_at": time.time(),
            "phase": None,
            "engine_first_token_ms": round(timing.first_token_s * 1000, 2),
            "engine_step_ms": round(timing.step_s * 1000, 2),
        }
        self._entry = self._entry.model_copy(update=update)
        self._write()

    def withdraw(self) -> None:
        """Stop the heartbeat and remove the entry."""
        self.stop()
        try:
            self._redis.delete(self._key)
        except redis.RedisError:
            log.warning("could not remove worker entry %s", self._key)

    def run(self) -> None:
        while not self._stopping.wait(self._heartbeat_s):
            try:
                self._write()
            except redis.RedisError as exc:
                log.warning("heartbeat failed (%s); retrying", exc.__class__.__name__)
            except Exception:
                # A dead heartbeat thread would have this live worker's jobs reaped.
                log.exception("heartbeat failed; retrying")

    def _write(self) -> None:
        stats = self._stats() if self._stats is not None else {}
        entry = WorkerEntry.model_validate(
            {
                **self._entry.model_dump(),
                **stats,
                "in_flight": self._in_flight(),
                "held_jobs": self._held() if self._held is not None else None,
                "seen_at": time.time(),
            }
        )
        write_entry(self._redis, entry, expiry_s=self._expiry_s)
