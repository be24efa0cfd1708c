"""OpenAI's wire shapes that chat and text completions share: stream options, the
answer's form (``response_format``, vLLM's ``structured_outputs``), the checks and
sampling fields both requests carry, the response objects' envelope and usage block,
the error envelope, and an SSE event's framing.

Shapes only: nothing here opens a job or knows HTTP.
"""

from __future__ import annotations

import json
import time
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator
from pydantic_core import PydanticCustomError

from schemas.events import ChoiceOutput, Timings, Usage
from schemas.requests import MAX_CHOICES


class StreamOptions(BaseModel):
    model_config = ConfigDict(extra="forbid")

    include_usage: bool = False


class JsonSchemaFormat(BaseModel):
    """``response_format.json_schema``: the schema the answer must match.

    The engine constrains every token to the schema, so an answer always matches it:
    ``strict`` is honoured whatever its value.
    """

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    name: str = Field(min_length=1, max_length=64)
    description: str | None = None
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None


class ResponseFormat(BaseModel):
    """``response_format``: free text, any JSON object, or JSON matching a schema."""

    model_config = ConfigDict(extra="forbid")

    type: Literal["text", "json_object", "json_schema"]
    json_schema: JsonSchemaFormat | None = None

    @model_validator(mode="after")
    def _schema_iff_json_schema(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("type json_schema needs json_schema (its name and schema)")
        if self.type != "json_schema" and self.json_schema is not None:
            raise ValueError(f"type {self.type} takes no json_schema")
        return self


class VllmStructuredOutputs(BaseModel):
    """vLLM's ``structured_outputs`` (sent through ``extra_body``): exactly one of
    a JSON schema, any JSON object, a choice among strings, or a regex."""

    model_config = ConfigDict(extra="forbid", populate_by_name=True)

    json_: dict[str, Any] | None = Field(default=None, alias="json")
    json_object: Literal[True] | None = None
    choice: list[str] | None = None
    regex: str | None = None

    @model_validator(mode="after")
    def _exactly_one(self) -> VllmStructuredOutputs:
        given = [
            name
            for name, value in (
                ("json", self.json_),
                ("json_object", self.json_object),
                ("choice", self.choice),
                ("regex", self.regex),
            )
            if value is not None
        ]
        if len(given) != 1:
            raise ValueError(
                "structured_outputs takes exactly one of json, json_object, choice, regex; "
                f"got {', '.join(given) or 'none'}"
            )
        return self

    def constraint(self) -> dict[str, Any]:
        """The equivalent ``schemas.sampling.StructuredOutput`` fields."""
        if self.json_ is not None:
            return {"kind": "json_schema", "json_schema": self.json_}
        if self.json_object:
            return {"kind": "json_object"}
        if self.choice is not None:
            return {"kind": "choice", "choice": self.choice}
        return {"kind": "regex", "regex": self.regex}


def asks_for_nothing(name: str, value: object, quiet: tuple[object, ...]) -> object:
    """``value`` of field ``name``, which llmq does not serve, where it asks for nothing:
    null, or one of ``quiet``. Raises an ``unserved_field`` error naming the field and
    what may be sent instead."""
    # By type too: 0 == False in Python, but top_logprobs=false is not its default.
    if value is None or any(type(value) is type(q) and value == q for q in quiet):
        return value
    shown = ", ".join(json.dumps(v) for v in (None, *quiet))
    raise PydanticCustomError(
        "unserved_field",
        "llmq does not serve {field}; leave it out or send {quiet}",
        {"field": name, "quiet": shown},
    )


def token_id_keys(logit_bias: dict[str, float] | None) -> dict[str, float] | None:
    """``logit_bias`` whose keys are token ids; raises ``ValueError`` for another key."""
    for token in logit_bias or {}:
        # JSON keys are strings: OpenAI's are token ids written in decimal.
        if not (token.isascii() and token.isdigit() and len(token) <= 9):
            raise ValueError(f"logit_bias keys are token ids, not {token!r}")
    return logit_bias


def check_one_form(request: OpenAiGenerationRequest) -> None:
    """Raise ``ValueError`` for a request that constrains its answer's form twice."""
    if request.structured_outputs is not None and request.response_format not in (
        None,
        ResponseFormat(type="text"),
    ):
        raise ValueError("send response_format or structured_outputs, not both")


class OpenAiGenerationRequest(BaseModel):
    """The fields and checks a chat and a text completion request share: a field
    nobody defines is refused by name, ``logit_bias`` is keyed by token ids, and the
    answer's form is constrained once at most (:func:`check_one_form`, before a
    subclass's own checks)."""

    model_config = ConfigDict(extra="forbid")

    model: str
    stream: bool = False
    stream_options: StreamOptions | None = None
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    stop: str | list[str] | None = None
    seed: int | None = None
    n: int = Field(default=1, ge=1, le=MAX_CHOICES, description="choices, each its own request")
    presence_penalty: float | None = None
    frequency_penalty: float | None = None
    logit_bias: dict[str, float] | None = None
    user: str | None = None
    response_format: ResponseFormat | None = None
    metadata: dict[str, Any] | None = None
    # vLLM's sampling extras, sent by SDKs through extra_body.
    top_k: int | None = None
    min_p: float | None = None
    repetition_penalty: float | None = None
    min_tokens: int | None = None
    structured_outputs: VllmStructuredOutputs | None = None
    # llmq extensions, sent by SDKs through extra_body.
    priority: Literal["interactive", "batch"] | None = None

    @field_validator("logit_bias")
    @classmethod
    def _bias_keys_are_token_ids(cls, value: dict[str, float] | None) -> dict[str, float] | None:
        return token_id_keys(value)

    @model_validator(mode="after")
    def _one_form_constraint(self) -> Self:
        check_one_form(self)
        return self

    def sampling_fields(self, *, logprobs: int | None) -> dict[str, Any]:
        """``schemas.sampling.Sampling`` fields, those the caller set; ``logprobs`` is the
        number of top log probabilities asked for (None: none)."""
        sampling: dict[str, Any] = {
            name: value
            for name, value in (
                ("presence_penalty", self.presence_penalty),
                ("frequency_penalty", self.frequency_penalty),
                ("repetition_penalty", self.repetition_penalty),
                ("top_k", self.top_k),
                ("min_p", self.min_p),
                ("min_tokens", self.min_tokens),
                ("logprobs", logprobs),
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


def response_object(
    kind: str, response_id: str, model: str, choices: list[dict[str, Any]]
) -> dict[str, Any]:
    """The head every response object and chunk starts with, created now."""
    return {
        "id": response_id,
        "object": kind,
        "created": int(time.time()),
        "model": model,
        "choices": choices,
    }


@dataclass(frozen=True)
class JobAnswer:
    """What a whole answer (``chat.completion`` or ``text_completion``) says of a
    finished job: its text and why it ended (or each choice, for a request of several),
    the model the call asked for, and the job's usage, timings and tier."""

    job_id: str
    model: str
    text: str
    finish_reason: str | None
    usage: Usage
    timings: Timings
    tier: str
    choices: Sequence[ChoiceOutput] | None = None


def whole_answer(
    kind: str, response_id: str, answer: JobAnswer, choices: list[dict[str, Any]]
) -> dict[str, Any]:
    """A whole answer: its choices, usage, and what llmq adds (the job, its tier and
    timings)."""
    body = response_object(kind, response_id, answer.model, choices)
    body["usage"] = usage_block(answer.usage)
    body["llmq"] = {
        "job_id": answer.job_id,
        "tier": answer.tier,
        "timings": answer.timings.model_dump(),
    }
    return body


def stream_chunk(
    kind: str, response_id: str, model: str, choice: dict[str, Any], usage: Usage | None
) -> dict[str, Any]:
    """A streamed chunk of ``choice``; with ``usage``, the usage chunk (no choices)."""
    body = response_object(kind, response_id, model, [] if usage is not None else [choice])
    if usage is not None:
        body["usage"] = usage_block(usage)
    return body


def usage_block(usage: Usage) -> dict[str, Any]:
    return {
        "prompt_tokens": usage.prompt_tokens,
        "completion_tokens": usage.completion_tokens,
        "total_tokens": usage.prompt_tokens + usage.completion_tokens,
        "prompt_tokens_details": {"cached_tokens": usage.cached_prompt_tokens},
    }


def error_body(message: str, *, kind: str, code: str | None = None) -> dict[str, Any]:
    """OpenAI's error envelope."""
    return {"error": {"message": message, "type": kind, "param": None, "code": code}}


def sse_event(event_id: str | None, payload: dict[str, Any]) -> bytes:
    """One server-sent event carrying ``payload`` as JSON; ``event_id`` (None: no id)
    is what a client sends back as ``Last-Event-ID`` to resume."""
    head = f"id: {event_id}\n" if event_id else ""
    return f"{head}data: {json.dumps(payload, separators=(',', ':'))}\n\n".encode()


SSE_DONE = b"data: [DONE]\n\n"
"""The event that ends every stream, after its last chunk."""
