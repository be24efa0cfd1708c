"""Job lifecycle states and the result a caller gets back."""

from __future__ import annotations

from enum import StrEnum

from pydantic import BaseModel, ConfigDict

from schemas.events import ChoiceOutput, Timings, TokenLogprob, Usage
from schemas.queues import Priority, Tier


class JobStatus(StrEnum):
    """Where a job is in its life. Every status but ``queued`` and ``running`` is final.

    ``cancelled``: its client cancelled it. ``dead_letter``: its worker died on each of
    its allowed attempts, so it is not run again (a poison job must not loop).
    ``expired``: its deadline passed while it was still queued, so it never ran.
    """

    QUEUED = "queued"
    RUNNING = "running"
    DONE = "done"
    FAILED = "failed"
    CANCELLED = "cancelled"
    DEAD_LETTER = "dead_letter"
    EXPIRED = "expired"

    @property
    def is_final(self) -> bool:
        return self not in (JobStatus.QUEUED, JobStatus.RUNNING)


JOB_ID_MAX_CHARS = 32


def could_be_job_id(job_id: object) -> bool:
    """Whether ``job_id`` fits the id column: a string of at most 32 characters, no NUL,
    valid Unicode. Anything else names no job, and a database would refuse to compare it.
    """
    if not isinstance(job_id, str) or not job_id or len(job_id) > JOB_ID_MAX_CHARS:
        return False
    if "\x00" in job_id:
        return False
    try:
        job_id.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


CANCELLED_MESSAGE = "cancelled by its client"
"""The error a cancelled job ends with, wherever it was when the cancel came."""

EXPIRED_MESSAGE = "expired: its deadline passed before a worker could start it"


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
    logprobs: list[TokenLogprob] | None = None
    """Each token's log probability, for a request that asked (``Sampling.logprobs``)."""
    choices: list[ChoiceOutput] | None = None
    """Every choice, for a request of several (``n``); ``text``, ``finish_reason`` and
    ``logprobs`` are then the first one's."""
