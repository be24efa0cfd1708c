"""One root exception for everything llmq raises on purpose.

Library errors (Redis, SQL, vLLM) are translated into these at the boundary, so a
caller catches ``LlmqError`` and shows ``str(exc)`` instead of a traceback.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any


class LlmqError(Exception):
    """Root of every error llmq raises deliberately; its message is meant for people."""


class InvalidRequest(LlmqError):
    """The request or its enqueue options failed validation; nothing was enqueued."""


class PromptTooLong(InvalidRequest):
    """The prompt plus ``max_tokens`` does not fit the tier's context window."""


class IdempotencyConflict(InvalidRequest):
    """The idempotency key was already used by the same owner for a different request."""


class QueueFull(LlmqError):
    """The queue is at its depth limit; nothing was enqueued. Retry after a while."""

    def __init__(self, message: str, *, depth: int, retry_after_s: int) -> None:
        super().__init__(message)
        self.depth = depth
        self.retry_after_s = retry_after_s


class QuotaExceeded(LlmqError):
    """The caller's key is at one of its quotas (``quota`` names it); nothing was
    stored or created. Retry after some of its work ends or its files are deleted."""

    def __init__(self, message: str, *, quota: str, retry_after_s: int) -> None:
        super().__init__(message)
        self.quota = quota
        self.retry_after_s = retry_after_s


class InUse(LlmqError):
    """The thing cannot be deleted while something unfinished uses it."""


class NoWarmWorker(LlmqError):
    """No warm worker serves the tier, so an interactive request would only wait."""


class BrokerUnavailable(LlmqError):
    """Redis could not be reached; nothing was enqueued."""


class DatabaseUnavailable(LlmqError):
    """The job database could not be reached or refused the write."""


class JobNotFound(LlmqError):
    """No job with that id exists."""


class KeyNotFound(LlmqError):
    """No gateway API key with that id exists."""


class JobFailed(LlmqError):
    """The job ended with an error; the message says why."""


class JobCancelled(JobFailed):
    """The job was cancelled (by its owner) before it finished."""


class JobExpired(JobFailed):
    """The job's deadline passed while it was still queued; it never ran."""


def job_ended(job_id: str, message: str, status: str) -> JobFailed:
    """The error for a job that ended without an answer, by its final status."""
    kind = {"cancelled": JobCancelled, "expired": JobExpired}.get(status, JobFailed)
    return kind(f"job {job_id} {'failed' if kind is JobFailed else status}: {message}")


class JobTimeout(LlmqError):
    """The job did not finish within the time the caller was willing to wait."""


class ConfigError(LlmqError):
    """The settings are inconsistent or incomplete."""


class EngineError(LlmqError):
    """The inference engine failed to start or to generate."""


class EngineDead(EngineError):
    """The engine's process died; this worker cannot serve until it restarts."""


def validation_problems(
    errors: Iterable[Mapping[str, Any]], *, whole: str = "value", skip: int = 0
) -> str:
    """Validation errors (pydantic's ``errors()``) as people read them: one
    ``where: what`` each, joined with ``; ``. ``where`` is the error's location dotted,
    less its first ``skip`` parts (a request's ``body``), or ``whole`` where the error
    is the whole value's."""
    return "; ".join(
        f"{'.'.join(str(part) for part in list(error['loc'])[skip:]) or whole}: {error['msg']}"
        for error in errors
    )
