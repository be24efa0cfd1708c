"""``POST /v1/completions``: OpenAI's legacy text completions, as vLLM's server serves
them. The prompt is continued as it is (no chat template): the job carries it as a raw
prompt (``GenerationRequest.raw_prompt``), and rides the queue like any chat job.
"""

from __future__ import annotations

import json
import time
from collections.abc import AsyncIterator, Sequence
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from producer.aio import AsyncJobHandle
from producer.gateway import openai_models as oai
from producer.gateway.errors import http_error_for
from producer.gateway.metrics import GatewayMetrics
from producer.gateway.sse import encode
from schemas.errors import InvalidRequest, LlmqError, job_ended
from schemas.events import ErrorEvent, FinalEvent, Timings, TokenEvent, TokenLogprob, Usage
from schemas.sampling import MAX_TOP_LOGPROBS

DEFAULT_MAX_TOKENS = 16
"""OpenAI's and vLLM's default for a text completion (a chat answer's is llmq's 256)."""

# Fields a text completion defines that llmq serves only at the value that asks for
# nothing: the prompt back in the answer, text after the insertion point, and a best
# of several answers (each a second generation).
_QUIET: dict[str, tuple[object, ...]] = {
    "echo": (False,),
    "suffix": ("",),
    "best_of": (1,),
}


class CompletionRequest(BaseModel):
    """``POST /v1/completions``.

    As for chat, every field is served, or refused by name when it asks for something
    llmq does not serve; a field nobody defines is refused by name too.
    """

    model_config = ConfigDict(extra="forbid")

    model: str
    prompt: Any
    stream: bool = False
    stream_options: oai.StreamOptions | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=1, description="llmq returns one choice")
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS, strict=True)
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    response_format: oai.ResponseFormat | None = None
    # vLLM's sampling extras, sent by SDKs through extra_body.
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    structured_outputs: oai.VllmStructuredOutputs | None = None
    # llmq extensions, sent by SDKs through extra_body.
    priority: Literal["interactive", "batch"] | None = None
    metadata: dict[str, Any] | None = None
    # Refused unless they ask for nothing (_QUIET).
    echo: Any = None
    suffix: Any = None
    best_of: Any = None

    @field_validator("prompt")
    @classmethod
    def _one_text_prompt(cls, value: object) -> str:
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            value = value[0]
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            raise PydanticCustomError(
                "unserved_field",
                "llmq serves one prompt per request, not {count}: send each as its own request",
                {"count": len(value)},
            )
        if not isinstance(value, str):
            raise PydanticCustomError(
                "unserved_field", "llmq serves a prompt as text (a string), not token ids", {}
            )
        if not value.strip():
            raise ValueError("the prompt must not be empty")
        if "\x00" in value:
            raise ValueError("the prompt must not contain NUL characters")
        return value

    @field_validator(*_QUIET)
    @classmethod
    def _asks_for_nothing(cls, value: object, info: ValidationInfo) -> object:
        name = info.field_name or ""
        if value is None or any(type(value) is type(q) and value == q for q in _QUIET[name]):
            return value
        quiet = ", ".join(json.dumps(v) for v in (None, *_QUIET[name]))
        raise PydanticCustomError(
            "unserved_field",
            "llmq does not serve {field}; leave it out or send {quiet}",
            {"field": name, "quiet": quiet},
        )

    @field_validator("logit_bias")
    @classmethod
    def _bias_keys_are_token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        for token in value or {}:
            if not (token.isascii() and token.isdigit() and len(token) <= 9):
                raise ValueError(f"logit_bias keys are token ids, not {token!r}")
        return value

    @model_validator(mode="after")
    def _one_form_constraint(self) -> CompletionRequest:
        if self.structured_outputs is not None and self.response_format not in (
            None,
            oai.ResponseFormat(type="text"),
        ):
            raise ValueError("send response_format or structured_outputs, not both")
        return self

    @property
    def text(self) -> str:
        """The prompt (validated to one string)."""
        assert isinstance(self.prompt, str)
        return self.prompt

    def check_bounds(self, *, max_message_chars: int) -> None:
        """Raise ``InvalidRequest`` for a prompt longer than a message may be."""
        if len(self.text) > max_message_chars:
            raise InvalidRequest(
                f"prompt is {len(self.text)} characters long, "
                f"at most {max_message_chars} are accepted"
            )

    def to_llmq(self) -> dict[str, Any]:
        """The equivalent llmq request (validated later by ``GenerationRequest``)."""
        request: dict[str, Any] = {
            "messages": [{"role": "user", "content": self.text}],
            "raw_prompt": True,
            "max_tokens": self.max_tokens if self.max_tokens is not None else DEFAULT_MAX_TOKENS,
        }
        optional = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "metadata": self.metadata,
            "stop": [self.stop] if isinstance(self.stop, str) else self.stop,
            "user": self.user,
            "sampling": self._sampling() or None,
        }
        request.update({k: v for k, v in optional.items() if v is not None})
        return request

    def _sampling(self) -> dict[str, Any]:
        """``schemas.sampling.Sampling`` fields, those the caller set."""
        sampling: dict[str, Any] = {
            name: value
            for name, value in (
                ("presence_penalty", self.presence_penalty),
                ("frequency_penalty", self.frequency_penalty),
                ("repetition_penalty", self.repetition_penalty),
                ("top_k", self.top_k),
                ("min_p", self.min_p),
                ("min_tokens", self.min_tokens),
                ("logprobs", self.logprobs),
            )
            if value is not None
        }
        if self.logit_bias:
            sampling["logit_bias"] = {int(token): b for token, b in self.logit_bias.items()}
        if self.structured_outputs is not None:
            sampling["structured"] = self.structured_outputs.constraint()
        elif self.response_format is not None and self.response_format.type == "json_object":
            sampling["structured"] = {"kind": "json_object"}
        elif self.response_format is not None and self.response_format.json_schema is not None:
            schema = self.response_format.json_schema.schema_
            sampling["structured"] = {"kind": "json_schema", "json_schema": schema}
        return sampling


def completion_id(job_id: str) -> str:
    return f"cmpl-{job_id}"


def legacy_logprobs(tokens: Sequence[TokenLogprob], *, top: int, offset: int = 0) -> dict[str, Any]:
    """A text completion's ``logprobs``: parallel lists of the tokens, their log
    probabilities, each position's ``top`` most likely tokens plus the one chosen (as
    OpenAI defines it), and each token's character offset in the answer, counted from
    ``offset`` (the text before these tokens)."""
    texts, values, tops, offsets = [], [], [], []
    for token in tokens:
        texts.append(token.token)
        values.append(token.logprob)
        ranked = {token.token: token.logprob}
        for alternative in token.top_logprobs:
            if len(ranked) > top:
                break
            ranked.setdefault(alternative.token, alternative.logprob)
        tops.append(ranked)
        offsets.append(offset)
        offset += len(token.token)
    return {"tokens": texts, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}


def text_completion(
    *,
    job_id: str,
    model: str,
    text: str,
    finish_reason: str | None,
    usage: Usage,
    timings: Timings,
    tier: str,
    logprobs: dict[str, Any] | None = None,
) -> dict[str, Any]:
    """A ``text_completion`` object; ``logprobs`` (``legacy_logprobs``) where asked for."""
    return {
        "id": completion_id(job_id),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "text": text,
                "logprobs": logprobs,
                "finish_reason": finish_reason or "stop",
            }
        ],
        "usage": oai.usage_block(usage),
        "llmq": {"job_id": job_id, "tier": tier, "timings": timings.model_dump()},
    }


def text_chunk(
    *,
    job_id: str,
    model: str,
    text: str = "",
    finish_reason: str | None = None,
    logprobs: dict[str, Any] | None = None,
    usage: Usage | None = None,
) -> dict[str, Any]:
    """One streamed ``text_completion`` chunk; with ``usage``, the usage chunk (no choices)."""
    body: dict[str, Any] = {
        "id": completion_id(job_id),
        "object": "text_completion",
        "created": int(time.time()),
        "model": model,
        "choices": []
        if usage
        else [{"index": 0, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}],
    }
    if usage is not None:
        body["usage"] = oai.usage_block(usage)
    return body


async def completion_sse_events(
    handle: AsyncJobHandle,
    *,
    model: str,
    from_seq: int,
    logprobs: int | None,
    include_usage: bool,
    metrics: GatewayMetrics,
    started: float,
    timeout: float,
) -> AsyncIterator[bytes]:
    """Chunks from ``from_seq`` on, then ``[DONE]``; each SSE id is ``<job id>.<seq>``.

    With ``logprobs``, a resumed stream reads the job's events from the start (sending
    none before ``from_seq``), so each token's ``text_offset`` counts the text before it.
    """
    job_id = handle.job_id
    first = from_seq == 0
    chars = 0
    status = "200"
    try:
        read_from = 0 if logprobs is not None else from_seq
        async for event in handle.events(from_seq=read_from, timeout=timeout):
            event_id = f"{job_id}.{event.seq}"
            if isinstance(event, TokenEvent):
                offset, chars = chars, chars + len(event.text)
                if event.seq < from_seq:
                    continue
                if first:
                    metrics.ttft.labels(model).observe(time.perf_counter() - started)
                    first = False
                block = None
                if logprobs is not None:
                    block = legacy_logprobs(event.logprobs or [], top=logprobs, offset=offset)
                chunk = text_chunk(job_id=job_id, model=model, text=event.text, logprobs=block)
                yield encode(event_id, chunk)
            elif event.seq < from_seq:
                continue
            elif isinstance(event, FinalEvent):
                reason = event.finish_reason or "stop"
                yield encode(event_id, text_chunk(job_id=job_id, model=model, finish_reason=reason))
                if include_usage:
                    usage = text_chunk(job_id=job_id, model=model, usage=event.usage)
                    yield encode(event_id, usage)
            elif isinstance(event, ErrorEvent):
                http = http_error_for(job_ended(job_id, event.message, event.status))
                status = str(http.status)
                error = oai.error_body(event.message, kind=http.kind, code=http.code)
                yield encode(event_id, error)
    except LlmqError as exc:
        http = http_error_for(exc)
        status = str(http.status)
        yield encode(None, oai.error_body(str(exc), kind=http.kind, code=http.code))
    finally:
        metrics.requests.labels(model, status).inc()
    yield b"data: [DONE]\n\n"
