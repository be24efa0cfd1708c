"""The gateway's side of conversations: which conversation a call belongs to, and
``GET /v1/conversations/{id}/summaries`` for the key that owns it."""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI, Request

from producer.conversations import load_summaries, summary_view
from producer.gateway.context import GatewayContext
from producer.gateway.protocol.chat import ChatCompletionRequest

CONVERSATION_HEADER = "x-conversation-id"


def conversation_of(body: ChatCompletionRequest, request: Request) -> str | None:
    """The call's conversation: the ``X-Conversation-Id`` header, else the body's
    ``conversation_id``, else ``metadata.conversation_id``; None if none is given."""
    header = request.headers.get(CONVERSATION_HEADER)
    if header:
        return header
    if body.conversation_id:
        return body.conversation_id
    tagged = (body.metadata or {}).get("conversation_id")
    return str(tagged) if tagged not in (None, "") else None


def add_conversation_routes(app: FastAPI, gateway: GatewayContext) -> None:
    """Register ``GET /v1/conversations/{id}/summaries`` (owner only; others get 404)."""

    async def summaries(conversation_id: str, request: Request) -> dict[str, Any]:
        identity = await gateway.identify(request)
        found = await asyncio.to_thread(
            load_summaries,
            gateway.client.sessions,
            conversation_id,
            owner=identity.id if identity else None,
        )
        return {
            "object": "list",
            "conversation_id": conversation_id,
            "data": [summary_view(summary) for summary in found],
        }

    app.add_api_route("/v1/conversations/{conversation_id}/summaries", summaries, methods=["GET"])
