"""Everything a running worker holds, passed explicitly to the code that runs jobs."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

import redis
from sqlalchemy.orm import Session, sessionmaker

from schemas.prompt_registry import PromptCatalog
from schemas.queues import Priority, Tier
from schemas.settings import Settings
from workers.append_combiner import AppendCombiner
from workers.deferred_writes import DeferredWrites
from workers.engine.base import Engine
from workers.first_tokens import FirstTokenGate
from workers.held_jobs import HeldJobs
from workers.metrics import WorkerMetrics
from workers.prefix import PrefixCacheStats
from workers.received_starts import ReceivedStarts
from workers.running_jobs import RunningJobs
from workers.scheduler.prefills import PrefillPlaces
from workers.scheduler.slo_share import ShareChange, SloShare
from workers.shares import RecentFirstTokens

if TYPE_CHECKING:
    from workers.early_start import EarlyStart

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class WorkerRuntime:
    """One worker process: its tier, its warmed engine and its connections."""

    settings: Settings
    tier: Tier
    worker_id: str
    engine: Engine
    redis: redis.Redis
    sessions: sessionmaker[Session]
    prompts: PromptCatalog
    prefix_stats: PrefixCacheStats = field(default_factory=PrefixCacheStats)
    warm: threading.Event = field(default_factory=threading.Event)
    running: RunningJobs = field(default_factory=RunningJobs)
    held: HeldJobs = field(default_factory=HeldJobs)
    """The jobs whose tasks run now, reported with every heartbeat."""
    metrics: WorkerMetrics | None = None
    on_engine_dead: Callable[[], None] = lambda: None
    """Called once the engine is found dead; the worker stops so it can be restarted."""
    resend: Callable[[str, Tier, Priority], None] | None = None
    """Sends a job's message again (a batch job that gave way to interactive work)."""
    deferred: DeferredWrites = field(default_factory=DeferredWrites)
    """A job's end the database refused through every retry, until it takes it."""
    received: ReceivedStarts[EarlyStart] = field(default_factory=ReceivedStarts)
    """Engine requests started as their messages arrived, until their tasks take them."""
    first_tokens: FirstTokenGate = field(default_factory=FirstTokenGate)
    """Interactive requests before their first token, which batch starts wait out."""
    recent_first_tokens: RecentFirstTokens = field(default_factory=RecentFirstTokens)
    """The engine's part of the last interactive first tokens (``workers.shares``)."""
    appends: AppendCombiner | None = None
    """Combines the jobs' stream events into one round trip (None: one each)."""
    batch_prefills: PrefillPlaces = field(
        default_factory=lambda: PrefillPlaces(0, clock=time.monotonic)
    )
    """Batch prompts in the engine's prefill at once (``workers.scheduler.prefills``)."""
    batch_share: SloShare | None = None
    """Batch's share under interactive work, steered against the SLO (None: fixed)."""

    def interactive_first_token(self, seconds: float) -> None:
        """An interactive request's first token took ``seconds`` as its user waits."""
        if self.batch_share is not None:
            self._give_way(self.batch_share.first_token(seconds))

    def interactive_inter_token(self, seconds: float) -> None:
        """A finished interactive request's mean time between tokens."""
        if self.batch_share is not None:
            self._give_way(self.batch_share.inter_token(seconds))

    def _give_way(self, cut: ShareChange | None) -> None:
        # The SLO is at risk: batch jobs beyond the cut share stop now (back to their
        # queue), rather than run on for the seconds a batch answer takes.
        if cut is None or not self.settings.tier(self.tier).batch_gives_way:
            return
        halted = self.running.yield_batch(cut.after)
        log.info(
            "batch share cut %d -> %d (an interactive request took %.0f ms); %d batch "
            "job(s) give way",
            cut.before,
            cut.after,
            (cut.observed_s or 0.0) * 1000,
            len(halted),
        )
