"""What a caller asks for (the request) and how it wants it queued (the options).

The two are separate models on purpose: enqueue options are keyword-only at every
entry point and can never collide with a request field.
"""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)

from schemas.queues import Priority, Tier
from schemas.sampling import Sampling, StructuredOutput
from schemas.text import database_text, valid_unicode
from schemas.tools import MAX_TOOLS, ToolCall, ToolChoice, ToolSpec, ToolUse

MAX_CHOICES = 16
"""Most choices (``n``) one request may ask for: each is a request to the engine."""
MAX_TOKENS_CEILING = 32_768
"""No tier serves more; the per-tier context check at submit is stricter."""

MetadataValue = str | int | float | bool | None


class ChatMessage(BaseModel):
    """One turn of a conversation."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    role: Literal["system", "user", "assistant", "tool"]
    # Both left out of the stored form while unset, as a turn without tools was stored.
    tool_calls: list[ToolCall] | None = Field(
        default=None, min_length=1, max_length=MAX_TOOLS, exclude_if=lambda value: value is None
    )
    """An assistant turn's tool calls (its content may then be empty)."""
    tool_call_id: str | None = Field(
        default=None, max_length=200, exclude_if=lambda value: value is None
    )
    """A tool turn's answer to this call."""
    content: str = Field(max_length=200_000)

    @field_validator("content")
    @classmethod
    def _not_blank(cls, value: str, info: ValidationInfo) -> str:
        if not value.strip() and not info.data.get("tool_calls"):
            raise ValueError("message content must not be empty")
        # Turns are stored in text columns, which cannot hold NUL on PostgreSQL: a NUL
        # that passed here would fail the job's end, after its answer ran.
        if "\x00" in value:
            raise ValueError("message content must not contain NUL characters")
        return valid_unicode(value)

    @model_validator(mode="after")
    def _tool_fields_fit_role(self) -> ChatMessage:
        if self.tool_calls is not None and self.role != "assistant":
            raise ValueError("only an assistant message has tool_calls")
        if (self.tool_call_id is not None) != (self.role == "tool"):
            raise ValueError("a tool message, and only one, has a tool_call_id")
        return self


class GenerationRequest(BaseModel):
    """A chat completion request: messages, optionally behind a registered system prompt."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    messages: list[ChatMessage] = Field(min_length=1, max_length=512)
    system_prompt: str | None = Field(
        default=None,
        pattern=r"^[a-z0-9][a-z0-9_-]*(@[0-9]+)?$",
        description="Registered system prompt as name or name@version.",
    )
    max_tokens: int = Field(default=256, ge=1, le=MAX_TOKENS_CEILING)
    temperature: float = Field(default=0.7, ge=0.0, le=2.0)
    top_p: float = Field(default=1.0, gt=0.0, le=1.0)
    stop: list[str] = Field(default_factory=list, max_length=8)
    seed: int | None = Field(
        default=None, ge=-(2**63), le=2**64 - 1, description="what a 64-bit generator takes"
    )
    conversation_id: str | None = Field(default=None, max_length=200)
    metadata: dict[str, MetadataValue] = Field(default_factory=dict, max_length=64)
    # Both left out of the stored form while unset: a request that uses neither is
    # stored, queued and hashed as it was before they existed.
    sampling: Sampling | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="penalties, vLLM's sampling extras and structured output",
    )
    tools: list[ToolSpec] | None = Field(
        default=None, min_length=1, max_length=MAX_TOOLS, exclude_if=lambda value: value is None
    )
    """Functions the model may call (``schemas.tools``); left out while unset."""
    tool_choice: ToolChoice | None = Field(default=None, exclude_if=lambda value: value is None)
    """With ``tools``: auto (unset), required, or a named function."""
    parallel_tool_calls: bool = Field(default=True, exclude_if=lambda value: value)
    """With ``tools``: whether an answer may make several calls; stored only when off."""
    user: str | None = Field(
        default=None,
        max_length=256,
        exclude_if=lambda value: value is None,
        description="the caller's own id for its end user (OpenAI's user); stored, "
        "not used to generate",
    )
    n: int = Field(
        default=1,
        ge=1,
        le=MAX_CHOICES,
        exclude_if=lambda value: value == 1,
        description="how many answers (choices) to generate, each its own engine request",
    )
    raw_prompt: bool = Field(
        default=False,
        exclude_if=lambda value: not value,
        description="the one user message is a text prompt for the model to continue, "
        "encoded as it is, without the chat template (OpenAI's legacy completions)",
    )

    @field_validator("stop")
    @classmethod
    def _stop_is_unicode(cls, value: list[str]) -> list[str]:
        return [valid_unicode(text) for text in value]

    @field_validator("conversation_id", "user")
    @classmethod
    def _storable_text(cls, value: str | None) -> str | None:
        return database_text(value)

    @field_validator("sampling")
    @classmethod
    def _sampling_or_none(cls, value: Sampling | None) -> Sampling | None:
        # Options that change nothing are no options: stored and hashed as absent.
        return None if value is not None and value.is_default() else value

    @field_validator("metadata")
    @classmethod
    def _metadata_is_storable(cls, value: dict[str, MetadataValue]) -> dict[str, MetadataValue]:
        for key, item in value.items():
            valid_unicode(key)
            if isinstance(item, str):
                valid_unicode(item)
            elif isinstance(item, float) and not math.isfinite(item):
                # JSON has no NaN or infinity: the database would refuse the row.
                raise ValueError(f"metadata {key!r} must be a finite number, not {item}")
        return value

    @model_validator(mode="before")
    @classmethod
    def _forced_call_constrains_the_answer(cls, data: Any) -> Any:
        # A tool_choice that forces a call is served by constraining the answer to the
        # call's form; stored in ``sampling`` like any other constraint, so the engine,
        # the lost-worker rule and the stored row see it as such.
        if not isinstance(data, dict) or data.get("tool_choice") in (None, "auto"):
            return data
        try:
            use = ToolUse.model_validate(
                {
                    "tools": data.get("tools"),
                    "choice": data["tool_choice"],
                    "parallel": data.get("parallel_tool_calls", True),
                }
            )
            use.check()
            sampling = Sampling.model_validate(data.get("sampling") or {})
        except ValueError:
            return data  # the fields' own validation says what is wrong
        schema = use.forced_schema()
        forced = StructuredOutput(kind="json_schema", json_schema=schema)
        if sampling.structured not in (None, forced):
            raise ValueError(
                "a tool_choice that forces a call takes no other structured output "
                "(response_format or structured_outputs)"
            )
        return {**data, "sampling": sampling.model_copy(update={"structured": forced})}

    def tool_use(self) -> ToolUse | None:
        """The request's tools and tool_choice, None without tools."""
        if not self.tools:
            return None
        return ToolUse(
            tools=tuple(self.tools),
            choice=self.tool_choice or "auto",
            parallel=self.parallel_tool_calls,
        )

    @model_validator(mode="after")
    def _tool_choice_among_tools(self) -> GenerationRequest:
        use = self.tool_use()
        if use is not None:
            use.check()
        elif self.tool_choice is not None:
            raise ValueError("tool_choice needs tools")
        return self

    @model_validator(mode="after")
    def _has_user_turn(self) -> GenerationRequest:
        if not any(message.role == "user" for message in self.messages):
            raise ValueError("messages must contain at least one user message")
        if self.n > 1 and self.tools:
            # A tool answer is read whole from one text; several would each need it.
            raise ValueError("n above 1 is not served with tools")
        if self.raw_prompt and (len(self.messages) != 1 or self.system_prompt is not None):
            # The model continues the prompt's text itself: there is no template to put
            # turns or a system prompt in.
            raise ValueError("a raw prompt is one user message, without a system_prompt")
        if self.sampling is not None and self.sampling.min_tokens > self.max_tokens:
            raise ValueError(
                f"sampling.min_tokens ({self.sampling.min_tokens}) must not exceed "
                f"max_tokens ({self.max_tokens})"
            )
        return self

    @classmethod
    def from_text(cls, text: str, **fields: object) -> GenerationRequest:
        """Build a one-turn request from plain text."""
        return cls.model_validate({"messages": [{"role": "user", "content": text}], **fields})

    @classmethod
    def from_prompt(cls, prompt: str, **fields: object) -> GenerationRequest:
        """Build a text completion request: ``prompt`` is continued as it is, without
        the chat template."""
        return cls.model_validate(
            {"messages": [{"role": "user", "content": prompt}], "raw_prompt": True, **fields}
        )


class EnqueueOptions(BaseModel):
    """How to queue a request; never part of the request itself."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    tier: Tier | Literal["auto"] = "auto"
    priority: Priority = Priority.INTERACTIVE
    idempotency_key: str | None = Field(default=None, min_length=1, max_length=200)
    owner: str | None = Field(
        default=None,
        min_length=1,
        max_length=32,
        description="who submits: the gateway's API key id, or a client's own namespace",
    )
    deadline_s: float | None = Field(
        default=None, gt=0, le=7 * 24 * 3600, description="abort the job this long after submit"
    )

    @field_validator("idempotency_key", "owner")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        # Both are database columns; PostgreSQL text cannot hold NUL.
        return database_text(value)


class RoutingDecision(BaseModel):
    """Which tier serves a job and why; stored on the job row."""

    model_config = ConfigDict(frozen=True)

    tier: Tier
    requested: Tier | Literal["auto"]
    reason: str
    confidence: float | None = None
    load_adjusted: bool = False
    routed_tier: Tier | None = None
    """For ``auto``: the tier the classifier chose. It differs from ``tier`` where no
    worker served it and the job went to the nearest served tier instead."""
