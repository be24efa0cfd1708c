"""The gateway's routes: chat completions (streamed or not), models, jobs, health, metrics.

Every call becomes a durable llmq job owned by the calling API key; the stream is the
job's event stream, so a client that reconnects with ``Last-Event-ID`` resumes it.
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import AsyncIterable, AsyncIterator, Awaitable, Callable
from contextlib import asynccontextmanager
from functools import partial
from typing import Any, NoReturn

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, Response, StreamingResponse
from prometheus_client import generate_latest

from producer.aio import AsyncClient, AsyncJobHandle
from producer.gateway import openai_models as oai
from producer.gateway.batches import FILES_PATH, add_batch_api
from producer.gateway.choice_stream import chat_choice_events
from producer.gateway.completions import (
    CompletionRequest,
    completion_sse_events,
    text_completion,
)
from producer.gateway.conversations import add_conversation_routes, conversation_of
from producer.gateway.errors import (
    BAD_REQUEST,
    MODEL_NOT_FOUND,
    NOT_FOUND,
    UNAUTHORIZED,
    GatewayError,
    http_error_for,
    rate_limited,
)
from producer.gateway.fairness import KeyFairness
from producer.gateway.guard import FrontDoor
from producer.gateway.keys import KEY_CACHE_S, KeyIdentity, authenticate, hash_secret
from producer.gateway.metrics import GatewayMetrics
from producer.gateway.ratelimit import auth_blocked, over_limit, record_auth_failure
from producer.gateway.scrape import ClusterScrape, ScrapeAge
from producer.gateway.sse import SseResponse, sse_events
from producer.jobs import routed_tier_of
from schemas.errors import LlmqError
from schemas.jobs import JobResult
from schemas.queues import Priority, Tier
from schemas.settings import Settings
from schemas.tables import Job

log = logging.getLogger(__name__)

MODELS = ["auto", *[tier.value for tier in Tier]]
RESULT_TIMEOUT_S = 600.0
OPENAPI_PATH = "/openapi.json"


class Gateway:
    """Route handlers sharing one llmq client, the auth policy and the metrics."""

    def __init__(
        self, settings: Settings, *, require_keys: bool, key_cache_s: float = KEY_CACHE_S
    ) -> None:
        self.settings = settings
        self.require_keys = require_keys
        self.key_cache_s = key_cache_s
        self.metrics = GatewayMetrics()
        self.cluster = ClusterScrape(settings, refresh_s=settings.metrics_refresh_s)
        self.metrics.registry.register(ScrapeAge(self.cluster))
        self._client: AsyncClient | None = None
        self._ready: tuple[float, LlmqError | None] | None = None
        self._ready_lock = asyncio.Lock()
        # By the key's hash, never the secret: a memory dump must not yield live keys.
        self._keys: dict[str, tuple[KeyIdentity, float]] = {}
        self.fairness = KeyFairness(
            sessions=lambda: self.client.sessions,
            redis=lambda: self.client.redis,
            max_active_jobs=settings.key_max_active_jobs,
            max_open_streams=settings.key_max_open_streams,
            # The longest a stream can last, plus a margin: a dead gateway's leases lapse.
            stream_lease_s=RESULT_TIMEOUT_S + 60,
        )

    @property
    def client(self) -> AsyncClient:
        assert self._client is not None, "the gateway has not started"
        return self._client

    @asynccontextmanager
    async def lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        self._client = await asyncio.to_thread(AsyncClient, self.settings)
        self.cluster.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.cluster.stop)
            await self._client.aclose()

    async def identify(self, request: Request) -> KeyIdentity | None:
        """The caller's key, as the front door checked it (None when keys are off)."""
        if not self.require_keys:
            return None
        identity: KeyIdentity | None = getattr(request.state, "identity", None)
        if identity is None:  # only if a /v1 route escaped the front door
            raise GatewayError("missing API key: send Authorization: Bearer <key>", UNAUTHORIZED)
        return identity

    async def authorize(self, authorization: str, address: str) -> KeyIdentity:
        """The key behind an Authorization header; enforces the login and rate limits.

        A valid key is always looked at, and admitted (within its own rate) even from an
        address blocked for failed logins: behind a load balancer or NAT, other clients'
        bad keys must not lock a tenant out. Only a missing or invalid key from a blocked
        address is refused with the block.

        Raises ``GatewayError``: 429 for a key over its rate, or a bad key from an address
        with too many recent failed logins; 401 for a missing or invalid key.
        """
        scheme, _, secret = authorization.partition(" ")
        secret = secret.strip() if scheme.lower() == "bearer" else ""
        identity = await self._authenticate(secret) if secret else None
        if identity is None:
            await self._refuse(address, missing=not secret)
        wait = await over_limit(self.client.redis, identity.id, identity.rate_limit_per_min)
        if wait is not None:
            raise GatewayError(
                f"rate limit of {identity.rate_limit_per_min} requests/min exceeded",
                rate_limited(wait),
            )
        return identity

    async def _refuse(self, address: str, *, missing: bool) -> NoReturn:
        """Refuse a missing or invalid key: 429 while ``address`` is blocked (counted no
        further), else 401 (counted against it)."""
        limit = self.settings.auth_failures_per_min
        blocked = await auth_blocked(self.client.redis, address, limit)
        if blocked is not None:
            raise GatewayError(
                f"too many failed authentications from this address (limit {limit}/min)",
                rate_limited(blocked),
            )
        await record_auth_failure(self.client.redis, address)
        if missing:
            raise GatewayError("missing API key: send Authorization: Bearer <key>", UNAUTHORIZED)
        raise GatewayError("invalid API key", UNAUTHORIZED)

    def _cached_key(self, secret: str) -> KeyIdentity | None:
        """The identity of a key checked less than ``key_cache_s`` ago, else None."""
        if not secret:
            return None
        cached = self._keys.get(hash_secret(secret))
        if cached is not None and time.monotonic() - cached[1] < self.key_cache_s:
            return cached[0]
        return None

    async def _authenticate(self, secret: str) -> KeyIdentity | None:
        # Known keys are remembered briefly: a database round trip per call would be
        # most of what the gateway adds to a first token. Revocation lands within the TTL.
        cached = self._cached_key(secret)
        if cached is not None:
            return cached
        digest = hash_secret(secret)
        self._keys.pop(digest, None)
        identity = await asyncio.to_thread(authenticate, self.client.sessions, secret)
        if identity is not None:
            self._keys[digest] = (identity, time.monotonic())
        return identity

    async def owned_job(self, job_id: str, identity: KeyIdentity | None) -> Job:
        """The job row, if the caller owns it; another key's job does not exist for them."""
        row = await self.client.job(job_id)
        if identity is not None and row.owner != identity.id:
            raise GatewayError(f"no job with id {job_id}", NOT_FOUND)
        return row

    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    async def readyz(self) -> JSONResponse:
        failure = await self._readiness()
        if failure is not None:
            return error_response(failure)
        return JSONResponse({"status": "ready"})

    async def _readiness(self) -> LlmqError | None:
        """Why the gateway is not ready (None: it is), as checked at most
        ``readyz_cache_s`` ago: a probe flood costs one ping and one read per period."""
        async with self._ready_lock:
            if self._ready is not None:
                checked_at, failure = self._ready
                if time.monotonic() - checked_at < self.settings.readyz_cache_s:
                    return failure
            try:
                await asyncio.to_thread(self.client.sync.ready)
                failure = None
            except LlmqError as exc:
                failure = exc
            self._ready = (time.monotonic(), failure)
            return failure

    async def prometheus(self) -> Response:
        # The gateway's own series are in memory; the cluster's come from the last
        # rendering (scrape.py), so a scrape never waits on Redis or the database.
        body = generate_latest(self.metrics.registry) + self.cluster.read()
        return Response(body, media_type="text/plain; version=0.0.4")

    async def models(self, request: Request) -> dict[str, Any]:
        await self.identify(request)
        served = [*MODELS, *(str(v) for v in self.settings.variants)]
        data = [{"id": m, "object": "model", "created": 0, "owned_by": "llmq"} for m in served]
        return {"object": "list", "data": data}

    async def job(self, job_id: str, request: Request) -> dict[str, Any]:
        row = await self.owned_job(job_id, await self.identify(request))
        return job_view(row)

    async def cancel_job(self, job_id: str, request: Request) -> dict[str, Any]:
        """``POST /v1/jobs/{id}/cancel``: stop a job the caller owns; its state after."""
        await self.owned_job(job_id, await self.identify(request))
        await self.client.cancel(job_id)
        row = await self.client.job(job_id)
        return job_view(row)

    async def chat_completions(
        self, body: oai.ChatCompletionRequest, request: Request
    ) -> JSONResponse | StreamingResponse:
        started = time.perf_counter()
        identity = await self.identify(request)
        self._check_model(body.model)
        body.check_bounds(
            max_messages=self.settings.max_messages,
            max_message_chars=self.settings.max_message_chars,
        )
        handle, release, resume = await self._open_job(
            request, identity, stream=body.stream, submit=partial(self._submit, body)
        )
        if body.stream:
            # Several choices stream each apart (choice_stream); a tool answer is one.
            stream = (
                chat_choice_events if body.n > 1 else partial(sse_events, tool_use=body.tool_use())
            )
            events = stream(
                handle,
                model=body.model,
                from_seq=resume[1] + 1 if resume else 0,
                include_usage=bool(body.stream_options and body.stream_options.include_usage),
                metrics=self.metrics,
                started=started,
                timeout=RESULT_TIMEOUT_S,
            )
            return self._streamed(handle, release, events)
        result = await self._whole(handle, body.model)
        return JSONResponse(
            oai.completion(
                job_id=result.job_id,
                model=body.model,
                text=result.text,
                finish_reason=result.finish_reason,
                usage=result.usage,
                timings=result.timings,
                tier=result.tier.value,
                logprobs=(result.logprobs or []) if body.logprobs else None,
                tool_use=body.tool_use(),
                choices=result.choices,
            ),
            headers=tier_headers(handle),
        )

    async def completions(
        self, body: CompletionRequest, request: Request
    ) -> JSONResponse | StreamingResponse:
        """``POST /v1/completions``: the prompt continued as it is, without the chat
        template; a job like a chat completion's (keys, priorities, idempotency, resume)."""
        started = time.perf_counter()
        identity = await self.identify(request)
        self._check_model(body.model)
        body.check_bounds(max_message_chars=self.settings.max_message_chars)
        handle, release, resume = await self._open_job(
            request, identity, stream=body.stream, submit=partial(self._submit_prompt, body)
        )
        if body.stream:
            events = completion_sse_events(
                handle,
                model=body.model,
                from_seq=resume[1] + 1 if resume else 0,
                logprobs=body.logprobs,
                include_usage=bool(body.stream_options and body.stream_options.include_usage),
                metrics=self.metrics,
                started=started,
                timeout=RESULT_TIMEOUT_S,
            )
            return self._streamed(handle, release, events)
        result = await self._whole(handle, body.model)
        return JSONResponse(
            text_completion(
                job_id=result.job_id,
                model=body.model,
                text=result.text,
                finish_reason=result.finish_reason,
                usage=result.usage,
                timings=result.timings,
                tier=result.tier.value,
                logprobs=body.logprobs,
                tokens=result.logprobs or [],
                choices=result.choices,
            ),
            headers=tier_headers(handle),
        )

    @staticmethod
    def _streamed(
        handle: AsyncJobHandle,
        release: Callable[[], Awaitable[None]] | None,
        events: AsyncIterable[bytes],
    ) -> SseResponse:
        """The job's SSE response; the stream slot is released when it ends."""
        return SseResponse(
            events, release=partial(_after_stream, handle, release), headers=tier_headers(handle)
        )

    async def _whole(self, handle: AsyncJobHandle, model: str) -> JobResult:
        """The job's whole result, once it ended (its handle closed), counted as a 200."""
        try:
            result = await handle.result(timeout=RESULT_TIMEOUT_S)
        finally:
            await handle.aclose()
        self.metrics.requests.labels(model, "200").inc()
        return result

    def _check_model(self, model: str) -> None:
        """Raise a 404 ``GatewayError`` for a model llmq does not serve."""
        if model not in MODELS and model not in self.settings.tiers:
            served = [*MODELS, *(str(v) for v in self.settings.variants)]
            raise GatewayError(
                f"unknown model {model!r}; use one of {', '.join(served)}", MODEL_NOT_FOUND
            )

    async def _open_job(
        self,
        request: Request,
        identity: KeyIdentity | None,
        *,
        stream: bool,
        submit: Callable[[Request, KeyIdentity | None], Awaitable[AsyncJobHandle]],
    ) -> tuple[AsyncJobHandle, Callable[[], Awaitable[None]] | None, tuple[str, int] | None]:
        """The call's job: the one ``Last-Event-ID`` names (a resumed stream), else a new
        one from ``submit``; with the stream slot it holds (to release) and where a
        resumed stream goes on."""
        resume = resume_point(request.headers.get("last-event-id"))
        release = None
        if stream and identity is not None:
            release = await self.fairness.open_stream(identity.id)
        try:
            if resume is not None:
                row = await self.owned_job(resume[0], identity)
                handle = AsyncJobHandle(
                    self.client,
                    row.id,
                    Tier(row.tier),
                    Priority(row.priority),
                    routed_tier=routed_tier_of(row),
                )
            elif identity is not None:
                async with self.fairness.submitting(identity.id):
                    handle = await submit(request, identity)
            else:
                handle = await submit(request, identity)
        except BaseException:
            if release is not None:
                await release()
            raise
        return handle, release, resume

    async def _submit_prompt(
        self, body: CompletionRequest, request: Request, identity: KeyIdentity | None
    ) -> AsyncJobHandle:
        priority = body.priority or request.headers.get("x-priority") or "interactive"
        return await self.client.submit(
            body.to_llmq(),
            tier=body.model,
            priority=priority,
            idempotency_key=request.headers.get("idempotency-key"),
            owner=identity.id if identity else None,
            require_warm_worker=priority == Priority.INTERACTIVE,
            subscribe=True,
        )

    async def _submit(
        self, body: oai.ChatCompletionRequest, request: Request, identity: KeyIdentity | None
    ) -> AsyncJobHandle:
        priority = body.priority or request.headers.get("x-priority") or "interactive"
        return await self.client.submit(
            body.to_llmq(),
            tier=body.model,
            priority=priority,
            idempotency_key=request.headers.get("idempotency-key"),
            owner=identity.id if identity else None,
            conversation_id=conversation_of(body, request),
            # A person is waiting: refuse now rather than queue behind no worker.
            require_warm_worker=priority == Priority.INTERACTIVE,
            # The answer is read at once: its subscription is confirmed while the job
            # is recorded instead of after, on the way to the first token.
            subscribe=True,
        )


def tier_headers(handle: AsyncJobHandle) -> dict[str, str]:
    """``x-llmq-tier`` (the tier that serves the job) and, for ``auto``,
    ``x-llmq-routed-tier`` (the tier the classifier chose)."""
    headers = {"x-llmq-tier": handle.tier.value}
    if handle.routed_tier is not None:
        headers["x-llmq-routed-tier"] = handle.routed_tier.value
    return headers


async def _after_stream(
    handle: AsyncJobHandle, release_slot: Callable[[], Awaitable[None]] | None
) -> None:
    """However a stream ends (even before its first read), give back what it held."""
    try:
        await handle.aclose()
    finally:
        if release_slot is not None:
            await release_slot()


def create_app(
    settings: Settings, *, require_keys: bool = True, key_cache_s: float = KEY_CACHE_S
) -> FastAPI:
    """The ASGI app. With ``require_keys`` (default) every /v1 call needs a Bearer key.

    A checked key is trusted for ``key_cache_s`` seconds: a revoked key is refused
    within that time.
    """
    gateway = Gateway(settings, require_keys=require_keys, key_cache_s=key_cache_s)
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
        authorize=gateway.authorize if require_keys else None,
        max_body_bytes=settings.max_body_bytes,
        on_error=error_response,
        upload_paths=frozenset({FILES_PATH}),
        keyed_paths=frozenset(
            {OPENAPI_PATH, *(["/metrics"] if settings.metrics_require_key else [])}
        ),
        max_upload_bytes=settings.max_upload_bytes,
        body_timeout_s=settings.body_read_timeout_s,
    )
    app.add_exception_handler(LlmqError, _llmq_error)  # type: ignore[arg-type]
    app.add_exception_handler(RequestValidationError, _invalid)  # type: ignore[arg-type]
    app.add_api_route("/healthz", gateway.healthz, methods=["GET"])
    app.add_api_route("/readyz", gateway.readyz, methods=["GET"])
    app.add_api_route("/metrics", gateway.prometheus, methods=["GET"])
    app.add_api_route("/v1/models", gateway.models, methods=["GET"])
    app.add_api_route("/v1/jobs/{job_id}", gateway.job, methods=["GET"])
    app.add_api_route("/v1/jobs/{job_id}/cancel", gateway.cancel_job, methods=["POST"])
    app.add_api_route(
        "/v1/chat/completions", gateway.chat_completions, methods=["POST"], response_model=None
    )
    app.add_api_route("/v1/completions", gateway.completions, methods=["POST"], response_model=None)
    add_batch_api(app, gateway)
    add_conversation_routes(app, gateway)
    app.state.gateway = gateway
    return app


async def _llmq_error(_request: Request, exc: LlmqError) -> JSONResponse:
    return error_response(exc)


async def _invalid(_request: Request, exc: RequestValidationError) -> JSONResponse:
    problems = "; ".join(
        f"{'.'.join(str(p) for p in e['loc'][1:]) or 'body'}: {e['msg']}" for e in exc.errors()
    )
    return error_response(GatewayError(f"invalid request: {problems}", BAD_REQUEST))


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
        oai.error_body(str(exc), kind=http.kind, code=http.code),
        status_code=http.status,
        headers=headers,
    )


def resume_point(last_event_id: str | None) -> tuple[str, int] | None:
    """Job id and sequence number from an SSE event id ``<job id>.<seq>``."""
    if not last_event_id:
        return None
    job_id, _, seq = last_event_id.strip().rpartition(".")
    # ASCII digits only (str.isdigit() also takes "²", which int() refuses), and few
    # enough that the next sequence number stays a 64-bit integer for Redis.
    if not job_id or not (seq.isascii() and seq.isdigit() and len(seq) <= 18):
        raise GatewayError(f"malformed Last-Event-ID {last_event_id!r}", BAD_REQUEST)
    return job_id, int(seq)


def job_view(row: Job) -> dict[str, Any]:
    """``GET /v1/jobs/{id}``: status, timings and routing decision."""
    return {
        "id": row.id,
        "status": row.status,
        "tier": row.tier,
        "priority": row.priority,
        "routing": row.routing,
        "usage": {
            "prompt_tokens": row.prompt_tokens,
            "completion_tokens": row.completion_tokens,
            "cached_prompt_tokens": row.cached_prompt_tokens,
        },
        "timings": {
            "queue_wait_ms": row.queue_wait_ms,
            "ttft_ms": row.ttft_ms,
            "total_ms": row.total_ms,
        },
        "error": row.error,
        "created_at": row.created_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
    }
