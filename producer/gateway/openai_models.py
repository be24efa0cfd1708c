"""The slice of the OpenAI chat-completions API the gateway accepts and returns."""

from __future__ import annotations

import time
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from schemas.errors import InvalidRequest
from schemas.events import Timings, Usage


class StreamOptions(BaseModel):
    include_usage: bool = False


class ChatCompletionRequest(BaseModel):
    """``POST /v1/chat/completions``; fields OpenAI defines that llmq ignores are dropped."""

    model_config = ConfigDict(extra="ignore")

    model: str
    messages: list[dict[str, Any]] = Field(min_length=1)
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    max_completion_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1, description="llmq returns one choice")
    # llmq extensions, sent by SDKs through extra_body.
    priority: Literal["interactive", "batch"] | None = None
    system_prompt: str | None = None
    metadata: dict[str, Any] | None = None
    conversation_id: str | None = None

    def check_bounds(self, *, max_messages: int, max_message_chars: int) -> None:
        """Raise ``InvalidRequest`` for too many messages or a message too long."""
        if len(self.messages) > max_messages:
            raise InvalidRequest(
                f"too many messages: {len(self.messages)}, at most {max_messages} are accepted"
            )
        for index, message in enumerate(self.messages):
            content = _message(message)["content"]
            if isinstance(content, str) and len(content) > max_message_chars:
                raise InvalidRequest(
                    f"messages.{index}.content is {len(content)} characters long, "
                    f"at most {max_message_chars} are accepted"
                )

    def to_llmq(self) -> dict[str, Any]:
        """The equivalent llmq request (validated later by ``GenerationRequest``)."""
        request: dict[str, Any] = {
            "messages": [_message(m) for m in self.messages],
        }
        max_tokens = self.max_completion_tokens or self.max_tokens
        optional = {
            "max_tokens": max_tokens,
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "system_prompt": self.system_prompt,
            "metadata": self.metadata,
            "stop": [self.stop] if isinstance(self.stop, str) else self.stop,
        }
        request.update({k: v for k, v in optional.items() if v is not None})
        return request


def _message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        # OpenAI's content parts: llmq serves text only, so join the text parts. A part
        # whose text is not a string is passed on as it is, for validation to refuse.
        texts = [part.get("text", "") for part in content if isinstance(part, dict)]
        if all(isinstance(text, str) for text in texts):
            content = "".join(texts)
    return {"role": message.get("role"), "content": content}


def completion_id(job_id: str) -> str:
    return f"chatcmpl-{job_id}"


def usage_block(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens},
    }


def completion(
    *,
    job_id: str,
    model: str,
    text: str,
    finish_reason: str | None,
    usage: Usage,
    timings: Timings,
    tier: str,
) -> dict[str, Any]:
    """A ``chat.completion`` object."""
    return {
        "id": completion_id(job_id),
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish_reason or "stop",
            }
        ],
        "usage": usage_block(usage),
        "llmq": {"job_id": job_id, "tier": tier, "timings": timings.model_dump()},
    }


def chunk(
    *,
    job_id: str,
    model: str,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    usage: Usage | None = None,
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` object."""
    body: dict[str, Any] = {
        "id": completion_id(job_id),
        "object": "chat.completion.chunk",
        "created": int(time.time()),
        "model": model,
        "choices": [] if usage else [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = usage_block(usage)
    return body


def error_body(message: str, *, kind: str, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error envelope."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}
