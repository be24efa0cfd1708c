"""Job lifecycle states and the result a caller gets back."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from schemas.events import Timings, Usage
from schemas.queues import Priority, Tier


class JobStatus(StrEnum):
    """Where a job is in its life. ``done`` and ``failed`` are final."""

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"

    @property
    def is_final(self) -> bool:
        return self in (JobStatus.DONE, JobStatus.FAILED)


class JobResult(BaseModel):
    """The outcome of a finished job."""

    model_config = ConfigDict(frozen=True)

    job_id: str
    status: JobStatus
    text: str
    tier: Tier
    priority: Priority
    usage: Usage
    timings: Timings
    worker_id: str | None
    finish_reason: str | None = None
