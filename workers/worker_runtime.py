"""Everything a running worker holds, passed explicitly to the code that runs jobs."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass, field

import redis
from sqlalchemy.orm import Session, sessionmaker

from schemas.prompt_registry import PromptCatalog
from schemas.queues import Priority, Tier
from schemas.settings import Settings
from workers.append_combiner import AppendCombiner
from workers.deferred_writes import DeferredWrites
from workers.engine.base import Engine
from workers.held_jobs import HeldJobs
from workers.metrics import WorkerMetrics
from workers.prefix import PrefixCacheStats
from workers.received_starts import EarlyStart, ReceivedStarts
from workers.running_jobs import RunningJobs
from workers.scheduler_driver import SchedulerDriver


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
    """Sends a job's message again, to the front of its queue (a batch job that gave
    way to interactive work resumes before jobs that have not started)."""
    deferred: DeferredWrites = field(default_factory=DeferredWrites)
    """A job's end the database refused through every retry, until it takes it."""
    received: ReceivedStarts[EarlyStart] = field(default_factory=ReceivedStarts)
    """Engine requests started as their messages arrived, until their tasks take them."""
    appends: AppendCombiner | None = None
    """Combines the jobs' stream events into one round trip (None: one each)."""
    scheduling: SchedulerDriver = field(default_factory=SchedulerDriver.unpaced)
    """The worker's scheduler (``workers.scheduler``) and its driver in job threads:
    batch starts wait where it holds them, and batch jobs give way where it says."""

    def interactive_first_token(self, seconds: float) -> None:
        """An interactive request's first token took ``seconds`` as its user waits."""
        decision = self.scheduling.scheduler.first_token_measured(seconds)
        self.scheduling.give_way(decision, self.running)

    def interactive_inter_token(self, seconds: float) -> None:
        """An interactive stream's mean time between tokens over a window of it."""
        decision = self.scheduling.scheduler.inter_token_measured(seconds)
        self.scheduling.give_way(decision, self.running)
