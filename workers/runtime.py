"""Everything a running worker holds, passed explicitly to the code that runs jobs."""

from __future__ import annotations

from dataclasses import dataclass

import redis
from sqlalchemy.orm import Session, sessionmaker

from schemas.queues import Tier
from schemas.settings import Settings
from workers.engine.base import Engine


@dataclass(frozen=True)
class WorkerRuntime:
    """One worker process: its tier, its warmed engine and its connections."""

    settings: Settings
    tier: Tier
    worker_id: str
    engine: Engine
    redis: redis.Redis
    sessions: sessionmaker[Session]
