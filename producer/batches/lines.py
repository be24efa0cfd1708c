"""One line of a batch input file: its checks, and the llmq request it becomes."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError

from producer.gateway.protocol.chat import ChatCompletionRequest
from producer.gateway.protocol.embeddings import EMBED_MODELS, EmbeddingsRequest
from producer.gateway.protocol.text_completions import CompletionRequest
from producer.submission import describe_validation_error
from schemas.embeddings import EmbeddingRequest
from schemas.errors import InvalidRequest
from schemas.queues import Tier

CHAT_ENDPOINT = "/v1/chat/completions"
COMPLETIONS_ENDPOINT = "/v1/completions"
EMBEDDINGS_ENDPOINT = "/v1/embeddings"
ENDPOINTS = (CHAT_ENDPOINT, COMPLETIONS_ENDPOINT, EMBEDDINGS_ENDPOINT)
MODELS = ("auto", *[tier.value for tier in Tier])
MAX_CUSTOM_ID_CHARS = 200


class LineInvalid(InvalidRequest):
    """A batch line that cannot become a job; ``code`` is what its error line says."""

    def __init__(self, message: str, *, code: str = "invalid_request") -> None:
        super().__init__(message)
        self.code = code


@dataclass(frozen=True)
class BatchLine:
    """A line that passed the file-level checks: whom it answers, where, and what."""

    custom_id: str
    model: str
    """``auto`` or a tier name (``embed`` for an embeddings line)."""
    request: dict[str, Any]
    """The llmq request (``GenerationRequest`` fields, or ``EmbeddingRequest`` fields
    for an embeddings line); submit validates it again."""


def peek_custom_id(raw: str) -> str | None:
    """The line's ``custom_id`` if it has a usable one, else None; never raises."""
    try:
        data = json.loads(raw)
    except ValueError:
        return None
    custom_id = data.get("custom_id") if isinstance(data, dict) else None
    if not isinstance(custom_id, str) or not custom_id or len(custom_id) > MAX_CUSTOM_ID_CHARS:
        return None
    return custom_id if "\x00" not in custom_id and _encodes(custom_id) else None


def parse_line(
    raw: str,
    *,
    endpoint: str = CHAT_ENDPOINT,
    max_messages: int = 256,
    max_message_chars: int = 100_000,
) -> BatchLine:
    """Check one JSONL line ``{"custom_id", "method", "url", "body"}`` of a batch.

    Raises ``LineInvalid`` naming the first problem: not a JSON object, a missing or
    oversized ``custom_id``, a method other than POST, a ``url`` other than the
    batch's endpoint, a body that is not a request of that endpoint llmq serves
    (unknown model, streaming, too many or too long messages or prompt).
    """
    try:
        data = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise LineInvalid(f"the line is not valid JSON ({exc.msg})") from None
    except ValueError:
        raise LineInvalid("the line is not valid JSON") from None
    if not isinstance(data, dict):
        raise LineInvalid("the line must be a JSON object")
    custom_id, body = _envelope(data, endpoint)
    if endpoint == EMBEDDINGS_ENDPOINT:
        return BatchLine(custom_id=custom_id, model=Tier.EMBED.value, request=_embeddings(body))
    request: ChatCompletionRequest | CompletionRequest
    try:
        if endpoint == COMPLETIONS_ENDPOINT:
            request = CompletionRequest.model_validate(body)
        else:
            request = ChatCompletionRequest.model_validate(body)
    except ValidationError as exc:
        raise LineInvalid(f"invalid body: {describe_validation_error(exc)}") from None
    _check_served(request)
    try:
        if isinstance(request, CompletionRequest):
            request.check_bounds(max_message_chars=max_message_chars)
        else:
            request.check_bounds(max_messages=max_messages, max_message_chars=max_message_chars)
    except InvalidRequest as exc:
        raise LineInvalid(str(exc)) from None
    return BatchLine(custom_id=custom_id, model=request.model, request=request.to_llmq())


def _check_served(request: ChatCompletionRequest | CompletionRequest) -> None:
    """Raise ``LineInvalid`` for an unknown model or a line that asks to stream.

    A line may ask for ``logprobs`` (and ``top_logprobs``): its job's row keeps them,
    and its output line carries them as the endpoint's answer does."""
    if request.model not in MODELS:
        raise LineInvalid(
            f"unknown model {request.model!r}; use one of {', '.join(MODELS)}",
            code="model_not_found",
        )
    if request.stream:
        raise LineInvalid("a batch line cannot stream: leave stream unset or false")


def _embeddings(body: dict[str, Any]) -> dict[str, Any]:
    """The stored request of an embeddings line (``schemas.embeddings.EmbeddingRequest``
    fields); raises ``LineInvalid`` naming the field at fault."""
    try:
        request = EmbeddingsRequest.model_validate(body)
    except ValidationError as exc:
        raise LineInvalid(f"invalid body: {describe_validation_error(exc)}") from None
    if request.model not in EMBED_MODELS:
        raise LineInvalid(
            f"unknown embedding model {request.model!r}; use one of {', '.join(EMBED_MODELS)}",
            code="model_not_found",
        )
    try:
        return EmbeddingRequest.model_validate(request.to_llmq()).model_dump(mode="json")
    except ValidationError as exc:
        raise LineInvalid(f"invalid body: {describe_validation_error(exc)}") from None


def _envelope(data: dict[str, Any], endpoint: str) -> tuple[str, dict[str, Any]]:
    custom_id = data.get("custom_id")
    if not isinstance(custom_id, str) or not custom_id:
        raise LineInvalid("custom_id must be a non-empty string")
    if len(custom_id) > MAX_CUSTOM_ID_CHARS:
        raise LineInvalid(f"custom_id is longer than {MAX_CUSTOM_ID_CHARS} characters")
    if "\x00" in custom_id or not _encodes(custom_id):
        raise LineInvalid("custom_id must be valid Unicode without NUL characters")
    if data.get("method", "POST") != "POST":
        raise LineInvalid("method must be POST")
    url = data.get("url", endpoint)
    if url != endpoint:
        raise LineInvalid(f"url must be the batch's endpoint {endpoint}, not {url!r}")
    body = data.get("body")
    if not isinstance(body, dict):
        raise LineInvalid(f"body must be a JSON object (a request for {endpoint})")
    return custom_id, body


def _encodes(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True
