"""OpenAI's inference paths: ``GET /v1/models``, ``POST /v1/chat/completions``,
``POST /v1/completions`` and ``POST /v1/embeddings``. HTTP only: the body is parsed by
its protocol model, the headers become ``CallOptions``, and the serving layer's answer
becomes a JSON or event-stream response with the job's tier headers."""

from __future__ import annotations

import time
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse

from producer.aio import AsyncJobHandle
from producer.gateway.context import GatewayContext
from producer.gateway.protocol.chat import ChatCompletionRequest
from producer.gateway.protocol.embeddings import EmbeddingsRequest
from producer.gateway.protocol.text_completions import CompletionRequest
from producer.gateway.routes.conversations import conversation_of
from producer.gateway.routes.sse import SseResponse
from producer.gateway.serving.chat import ChatServing
from producer.gateway.serving.common import (
    Answer,
    CallOptions,
    JobServing,
    StreamedAnswer,
    served_models,
)
from producer.gateway.serving.embeddings import EmbeddingServing
from producer.gateway.serving.text_completions import TextCompletionServing
from schemas.queues import EMBED_TIER

CHAT_COMPLETIONS_PATH = "/v1/chat/completions"
COMPLETIONS_PATH = "/v1/completions"
ADMITTED_BY_ROUTE = frozenset({CHAT_COMPLETIONS_PATH, COMPLETIONS_PATH})
"""The paths whose calls take their key's rate verdict in the route (``CallOptions``'s
``admission``): it is decided while the job is prepared, before anything is sent."""


class OpenAiRoutes:
    """The handlers, sharing the gateway and one serving layer."""

    def __init__(self, gateway: GatewayContext) -> None:
        self.gateway = gateway
        jobs = JobServing(gateway)
        self.chat = ChatServing(jobs)
        self.text = TextCompletionServing(jobs)
        self.embedding = EmbeddingServing(jobs)

    async def models(self, request: Request) -> dict[str, Any]:
        await self.gateway.identify(request)
        data = [
            {"id": m, "object": "model", "created": 0, "owned_by": "llmq"}
            # The embedding model answers /v1/embeddings only, so chat errors do not
            # offer it; a model listing names it like any other.
            for m in [*served_models(self.gateway.settings), EMBED_TIER]
        ]
        return {"object": "list", "data": data}

    async def chat_completions(
        self, body: ChatCompletionRequest, request: Request
    ) -> JSONResponse | StreamingResponse:
        started = time.perf_counter()
        call = await self._call(request, conversation_of(body, request))
        answer = await self.chat.create(body, call, started=started)
        return respond(answer, keepalive_s=self.gateway.settings.timeouts.sse_keepalive_s)

    async def completions(
        self, body: CompletionRequest, request: Request
    ) -> JSONResponse | StreamingResponse:
        """``POST /v1/completions``: the prompt continued as it is, without the chat
        template; a job like a chat completion's (keys, priorities, idempotency, resume)."""
        started = time.perf_counter()
        call = await self._call(request, None)
        answer = await self.text.create(body, call, started=started)
        return respond(answer, keepalive_s=self.gateway.settings.timeouts.sse_keepalive_s)

    async def embeddings(self, body: EmbeddingsRequest, request: Request) -> JSONResponse:
        """``POST /v1/embeddings``: a job of the embedding tier, answered whole."""
        call = await self._call(request, None)
        answer = await self.embedding.create(body, call)
        return JSONResponse(answer.body, headers=tier_headers(answer.handle))

    async def _call(self, request: Request, conversation_id: str | None) -> CallOptions:
        """What the call says beside its body; raises a 401 ``GatewayError`` for a call
        that escaped the front door without a key."""
        headers = request.headers
        return CallOptions(
            identity=await self.gateway.identify(request),
            admission=self.gateway.admission(request),
            priority=headers.get("x-priority"),
            idempotency_key=headers.get("idempotency-key"),
            last_event_id=headers.get("last-event-id"),
            conversation_id=conversation_id,
        )


def respond(answer: Answer, *, keepalive_s: float) -> JSONResponse | StreamingResponse:
    """The HTTP response of a served answer, with the job's tier headers; a stream's
    release runs however its response ends, and it sends a keep-alive comment after
    ``keepalive_s`` of silence before its first event."""
    headers = tier_headers(answer.handle)
    if isinstance(answer, StreamedAnswer):
        return SseResponse(
            answer.events, release=answer.release, headers=headers, keepalive_s=keepalive_s
        )
    return JSONResponse(answer.body, headers=headers)


def tier_headers(handle: AsyncJobHandle) -> dict[str, str]:
    """``x-llmq-tier`` (the tier that serves the job) and, for ``auto``,
    ``x-llmq-routed-tier`` (the tier the classifier chose)."""
    headers = {"x-llmq-tier": handle.tier.value}
    if handle.routed_tier is not None:
        headers["x-llmq-routed-tier"] = handle.routed_tier.value
    return headers


def add_openai_routes(app: FastAPI, gateway: GatewayContext) -> None:
    """Add ``/v1/models``, ``/v1/chat/completions``, ``/v1/completions`` and
    ``/v1/embeddings``."""
    routes = OpenAiRoutes(gateway)
    app.add_api_route("/v1/models", routes.models, methods=["GET"])
    app.add_api_route(
        CHAT_COMPLETIONS_PATH, routes.chat_completions, methods=["POST"], response_model=None
    )
    app.add_api_route(COMPLETIONS_PATH, routes.completions, methods=["POST"], response_model=None)
    app.add_api_route("/v1/embeddings", routes.embeddings, methods=["POST"], response_model=None)
