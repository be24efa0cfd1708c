"""The gateway's ASGI app: the front door (keys, rate limits, body bounds) before
every route, the error handlers, and each group of routes.

Where each part lives: ``routes/`` (HTTP: paths, parsing, responses), ``serving/``
(a request becomes a job, a job's stream becomes chunks or an answer), ``protocol/``
(OpenAI's shapes), and the front door in ``guard``, ``fairness`` and ``ratelimit``.
"""

from __future__ import annotations

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException

from producer.gateway.context import GatewayContext
from producer.gateway.errors import BAD_REQUEST, NOT_FOUND, GatewayError, HttpError, error_response
from producer.gateway.guard import FrontDoor
from producer.gateway.probe_pacing import ProbePacer
from producer.gateway.routes.batches import FILES_PATH, add_batch_api
from producer.gateway.routes.conversations import add_conversation_routes
from producer.gateway.routes.jobs import add_job_routes
from producer.gateway.routes.openai import ADMITTED_BY_ROUTE, add_openai_routes
from producer.gateway.routes.probes import add_probe_routes
from schemas.errors import LlmqError, validation_problems
from schemas.settings import Settings

OPENAPI_PATH = "/openapi.json"
SERVED_ENDPOINTS = (
    "/v1/chat/completions, /v1/completions, /v1/embeddings, /v1/models, /v1/files, "
    "/v1/batches, /v1/jobs, /v1/conversations"
)
# A probe over its address's rate waits at most this long for its turn, then is
# refused (429): an orchestrator's own probes, far below the rate, never wait.
PROBE_MAX_WAIT_S = 2.0
# A path echoed in an error is cut: the caller sent it, but it may be huge.
MAX_ECHOED_PATH_CHARS = 200


def create_app(
    settings: Settings, *, require_keys: bool = True, key_cache_s: float | None = None
) -> FastAPI:
    """The ASGI app. With ``require_keys`` (default) every /v1 call needs a Bearer key.

    A checked key is trusted for ``key_cache_s`` seconds (None:
    ``settings.timeouts.key_cache_s``): a revoked key is refused within that time.
    The app's ``state.gateway`` is its ``GatewayContext``.
    """
    gateway = GatewayContext(settings, require_keys=require_keys, key_cache_s=key_cache_s)
    # With keys on, the API's schema needs a key like /v1 does, and the browsable
    # pages (which fetch it without one) are not served.
    app = FastAPI(
        title="llmq gateway",
        lifespan=gateway.lifespan,
        docs_url=None if require_keys else "/docs",
        redoc_url=None if require_keys else "/redoc",
    )
    app.add_middleware(
        FrontDoor,
        authorize=gateway.keys.identify if require_keys else None,
        admit=gateway.keys.admit if require_keys else None,
        # Their calls are counted against the key's rate while the job is prepared.
        admitted_by_route=ADMITTED_BY_ROUTE,
        max_body_bytes=settings.max_body_bytes,
        on_error=error_response,
        upload_paths=frozenset({FILES_PATH}),
        keyed_paths=frozenset(
            {OPENAPI_PATH, *(["/metrics"] if settings.metrics_require_key else [])}
        ),
        max_upload_bytes=settings.max_upload_bytes,
        body_timeout_s=settings.body_read_timeout_s,
        probe_pacer=(
            ProbePacer(settings.probe_requests_per_s, max_wait_s=PROBE_MAX_WAIT_S)
            if settings.probe_requests_per_s > 0
            else None
        ),
    )
    app.add_exception_handler(LlmqError, _llmq_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_exception_handler(HTTPException, _unrouted)  # type: ignore[arg-type]
    add_probe_routes(app, gateway)
    add_job_routes(app, gateway)
    add_openai_routes(app, gateway)
    add_batch_api(app, gateway)
    add_conversation_routes(app, gateway)
    app.state.gateway = gateway
    return app


async def _llmq_error(_request: Request, exc: LlmqError) -> JSONResponse:
    return error_response(exc)


async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = validation_problems(exc.errors(), whole="body", skip=1)
    return error_response(GatewayError(f"invalid request: {problems}", BAD_REQUEST))


async def _unrouted(request: Request, exc: HTTPException) -> JSONResponse:
    """A path or method no route serves, in OpenAI's error shape and naming what is
    served."""
    asked = f"{request.method} {request.url.path[:MAX_ECHOED_PATH_CHARS]}"
    if exc.status_code == 404:
        message = f"{asked} is not served; llmq serves {SERVED_ENDPOINTS}"
        return error_response(GatewayError(message, NOT_FOUND))
    if exc.status_code == 405:
        allowed = HttpError(405, "invalid_request_error", "method_not_allowed")
        return error_response(GatewayError(f"{asked}: method not allowed", allowed))
    return error_response(GatewayError(str(exc.detail), HttpError(exc.status_code, "error")))
