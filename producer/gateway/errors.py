"""llmq errors as OpenAI-style HTTP errors: status, type and code a client can act on."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from fastapi.responses import JSONResponse

from producer.gateway.protocol.common import error_body
from schemas.errors import (
    BrokerUnavailable,
    DatabaseUnavailable,
    IdempotencyConflict,
    InUse,
    InvalidRequest,
    JobCancelled,
    JobExpired,
    JobFailed,
    JobNotFound,
    JobTimeout,
    LlmqError,
    NoWarmWorker,
    PromptTooLong,
    QueueFull,
    QuotaExceeded,
)

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class HttpError:
    status: int
    kind: str
    code: str | None = None
    retry_after_s: int | None = None


class GatewayError(LlmqError):
    """An error the gateway raises itself (auth, rate limit, unknown model)."""

    def __init__(self, message: str, http: HttpError) -> None:
        super().__init__(message)
        self.http = http


UNAUTHORIZED = HttpError(401, "authentication_error", "invalid_api_key")
MODEL_NOT_FOUND = HttpError(404, "invalid_request_error", "model_not_found")
NOT_FOUND = HttpError(404, "invalid_request_error", "not_found")
BAD_REQUEST = HttpError(400, "invalid_request_error", "invalid_request")


def rate_limited(retry_after_s: int) -> HttpError:
    return HttpError(429, "rate_limit_error", "rate_limit_exceeded", retry_after_s)


# Most specific first: PromptTooLong is an InvalidRequest, for one.
STATIC_MAPPING: list[tuple[type[LlmqError], HttpError]] = [
    (PromptTooLong, HttpError(413, "invalid_request_error", "context_length_exceeded")),
    (IdempotencyConflict, HttpError(409, "invalid_request_error", "idempotency_conflict")),
    (InvalidRequest, BAD_REQUEST),
    (InUse, HttpError(409, "invalid_request_error", "in_use")),
    (JobNotFound, NOT_FOUND),
    (NoWarmWorker, HttpError(503, "service_unavailable", "no_warm_worker", 5)),
    (BrokerUnavailable, HttpError(503, "service_unavailable", "backend_unavailable", 5)),
    (DatabaseUnavailable, HttpError(503, "service_unavailable", "backend_unavailable", 5)),
    (JobTimeout, HttpError(504, "timeout", "job_timeout")),
    # A cancelled or expired job is the caller's doing, not a server error.
    (JobCancelled, HttpError(409, "invalid_request_error", "job_cancelled")),
    (JobExpired, HttpError(504, "timeout", "job_expired")),
    (JobFailed, HttpError(500, "server_error", "job_failed")),
]


def http_error_for(exc: LlmqError) -> HttpError:
    """The HTTP status and OpenAI error type for an llmq error."""
    if isinstance(exc, GatewayError):
        return exc.http
    if isinstance(exc, QueueFull):
        return HttpError(429, "rate_limit_error", "queue_full", exc.retry_after_s)
    if isinstance(exc, QuotaExceeded):
        return HttpError(429, "rate_limit_error", "quota_exceeded", exc.retry_after_s)
    for kind, http in STATIC_MAPPING:
        if isinstance(exc, kind):
            return http
    return HttpError(500, "server_error", None)


def error_response(exc: LlmqError) -> JSONResponse:
    """An OpenAI-format error with the status (and Retry-After) the error calls for."""
    http = http_error_for(exc)
    if http.status >= 500:
        # The caller sees the message; the operator needs to know it happened.
        cause = exc.__cause__
        why = f" ({type(cause).__name__}: {cause})" if cause is not None else ""
        log.warning("answered %d %s: %s%s", http.status, http.code or http.kind, exc, why)
    headers = {"Retry-After": str(http.retry_after_s)} if http.retry_after_s else None
    return JSONResponse(
        error_body(str(exc), kind=http.kind, code=http.code),
        status_code=http.status,
        headers=headers,
    )
