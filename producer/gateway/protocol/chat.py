"""OpenAI's chat completions (``POST /v1/chat/completions``): the request the gateway
accepts, and the ``chat.completion`` and ``chat.completion.chunk`` objects it returns.

Shapes only: nothing here opens a job or knows HTTP.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from typing import Any, Literal

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
    model_validator,
)
from pydantic_core import PydanticCustomError

from producer.gateway.protocol.chat_messages import check_message, llmq_message
from producer.gateway.protocol.common import (
    JobAnswer,
    OpenAiGenerationRequest,
    asks_for_nothing,
    stream_chunk,
    whole_answer,
)
from schemas.errors import InvalidRequest
from schemas.events import TokenLogprob, Usage
from schemas.sampling import MAX_TOP_LOGPROBS
from schemas.tools import MAX_TOOLS, NamedToolChoice, ToolCall, ToolSpec, ToolUse

UNSERVED_FIELDS: dict[str, tuple[object, ...]] = {
    "functions": ([],),
    "function_call": ("none",),
    "modalities": (["text"],),
    "audio": (),
    "prediction": (),
    "web_search_options": (),
    "reasoning_effort": (),
    "verbosity": (),
    "service_tier": ("auto", "default"),
}
"""OpenAI's fields that llmq does not serve, each with the values (besides null) that
ask for nothing: a client library that sends such a default is served, one that asks
for the feature gets a 400 naming the field, never an answer without it."""

IGNORED_FIELDS = ("store", "prompt_cache_key")
"""Accepted and knowingly without effect: llmq records every job whatever ``store``
says, and caches every prompt's prefix without a key."""


class ChatCompletionRequest(OpenAiGenerationRequest):
    """``POST /v1/chat/completions``.

    Every field of OpenAI's request is either served, accepted knowingly without
    effect (``IGNORED_FIELDS``), or refused by name when it asks for something llmq
    does not serve (``UNSERVED_FIELDS``); a field nobody defines is refused by name too.
    """

    messages: list[dict[str, Any]] = Field(min_length=1)
    max_completion_tokens: int | None = None
    logprobs: bool | None = None
    top_logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS)
    safety_identifier: str | None = None
    # llmq extensions, sent by SDKs through extra_body.
    system_prompt: str | None = None
    conversation_id: str | None = None
    # Accepted, without effect (IGNORED_FIELDS).
    store: bool | None = None
    prompt_cache_key: str | None = None
    # Tools (schemas.tools): an empty list is no tools, as some libraries send it.
    tools: list[ToolSpec] | None = Field(default=None, max_length=MAX_TOOLS)
    tool_choice: Literal["none", "auto", "required"] | NamedToolChoice | None = None
    parallel_tool_calls: bool | None = Field(
        default=None, description="false: an answer makes at most one call (default true)"
    )
    # Refused unless they ask for nothing (UNSERVED_FIELDS).
    functions: Any = None
    function_call: Any = None
    modalities: Any = None
    audio: Any = None
    prediction: Any = None
    web_search_options: Any = None
    reasoning_effort: Any = None
    verbosity: Any = None
    service_tier: Any = None

    @field_validator(*UNSERVED_FIELDS)
    @classmethod
    def _asks_for_nothing(cls, value: object, info: ValidationInfo) -> object:
        name = info.field_name or ""
        return asks_for_nothing(name, value, UNSERVED_FIELDS[name])

    @field_validator("messages")
    @classmethod
    def _messages_served(cls, messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
        for index, message in enumerate(messages):
            check_message(index, message)
        return messages

    @model_validator(mode="after")
    def _logprobs_and_tools(self) -> ChatCompletionRequest:
        if self.top_logprobs and not self.logprobs:
            raise ValueError("top_logprobs needs logprobs: true")
        self._check_tools()
        return self

    def _check_tools(self) -> None:
        if not self.tools:
            if self.tool_choice not in (None, "none"):
                raise PydanticCustomError(
                    "tool_choice_without_tools", "tool_choice needs tools", {}
                )
            return
        use = self.tool_use()
        if use is None:
            return
        try:
            use.check()
        except ValueError as exc:
            raise PydanticCustomError("invalid_tools", str(exc), {}) from None
        constrained = self.structured_outputs is not None or (
            self.response_format is not None and self.response_format.type != "text"
        )
        if use.mode != "auto" and constrained:
            raise PydanticCustomError(
                "tool_choice_with_format",
                "tool_choice {choice} forces a call, whose form the answer takes: send no "
                "response_format or structured_outputs with it",
                {"choice": json.dumps(use.choice if isinstance(use.choice, str) else "named")},
            )

    def tool_use(self) -> ToolUse | None:
        """The tools the answer may call and how (None without tools, or with
        tool_choice none: the model is then not told of them)."""
        if not self.tools or self.tool_choice == "none":
            return None
        return ToolUse(
            tools=tuple(self.tools),
            choice=self.tool_choice or "auto",
            parallel=self.parallel_tool_calls is not False,
        )

    def check_bounds(self, *, max_messages: int, max_message_chars: int) -> None:
        """Raise ``InvalidRequest`` for too many messages or a message too long."""
        if len(self.messages) > max_messages:
            raise InvalidRequest(
                f"too many messages: {len(self.messages)}, at most {max_messages} are accepted"
            )
        for index, message in enumerate(self.messages):
            content = llmq_message(message)["content"]
            if isinstance(content, str) and len(content) > max_message_chars:
                raise InvalidRequest(
                    f"messages.{index}.content is {len(content)} characters long, "
                    f"at most {max_message_chars} are accepted"
                )

    def to_llmq(self) -> dict[str, Any]:
        """The equivalent llmq request (validated later by ``GenerationRequest``)."""
        request: dict[str, Any] = {
            "messages": [llmq_message(m) for m in self.messages],
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
            "user": self.user if self.user is not None else self.safety_identifier,
            "sampling": self._sampling() or None,
            "n": self.n if self.n > 1 else None,
        }
        request.update({k: v for k, v in optional.items() if v is not None})
        tools = self.tool_use()
        if tools is not None:
            # GenerationRequest adds the constraint a forced call takes.
            request["tools"] = [tool.model_dump() for tool in tools.tools]
            if tools.choice != "auto":
                request["tool_choice"] = (
                    tools.choice if isinstance(tools.choice, str) else tools.choice.model_dump()
                )
            if not tools.parallel:
                request["parallel_tool_calls"] = False
        return request

    def _sampling(self) -> dict[str, Any]:
        return self.sampling_fields(logprobs=(self.top_logprobs or 0) if self.logprobs else None)


def completion_id(job_id: str) -> str:
    return f"chatcmpl-{job_id}"


def completion(
    answer: JobAnswer,
    *,
    logprobs: list[TokenLogprob] | None = None,
    tool_use: ToolUse | None = None,
) -> dict[str, Any]:
    """A ``chat.completion`` object; ``logprobs`` for a request that asked for them;
    with ``tool_use``, the calls the answer makes as the message's ``tool_calls``; with
    the answer's ``choices`` (a request for several), one choice each."""
    message, finish_reason = answer_message(
        answer.job_id, answer.text, answer.finish_reason, tool_use
    )
    answers = [
        {
            "index": 0,
            "message": message,
            "logprobs": logprobs_block(logprobs),
            "finish_reason": finish_reason,
        }
    ]
    if answer.choices is not None:
        answers = [
            {
                "index": choice.index,
                "message": {"role": "assistant", "content": choice.text},
                "logprobs": logprobs_block(
                    (choice.logprobs or []) if logprobs is not None else None
                ),
                "finish_reason": choice.finish_reason or "stop",
            }
            for choice in answer.choices
        ]
    return whole_answer("chat.completion", completion_id(answer.job_id), answer, answers)


def answer_message(
    job_id: str, text: str, finish_reason: str | None, tool_use: ToolUse | None
) -> tuple[dict[str, Any], str]:
    """The answer's assistant message and its finish reason.

    An answer that calls tools has ``content`` null (or the text before its calls) and
    ``tool_calls``, and finishes with ``tool_calls``, unless ``max_tokens`` cut it
    (``length``: the arguments may be cut too).
    """
    reason = finish_reason or "stop"
    answer = tool_use.parse(text, job_id=job_id) if tool_use is not None else None
    if answer is None or not answer.calls:
        return {"role": "assistant", "content": text}, reason
    message = {
        "role": "assistant",
        "content": answer.content,
        "tool_calls": [call.model_dump() for call in answer.calls],
    }
    return message, reason if reason == "length" else "tool_calls"


def tool_call_deltas(calls: Sequence[ToolCall]) -> list[dict[str, Any]]:
    """``delta.tool_calls`` announcing ``calls`` whole, each at its index."""
    return [{"index": index, **call.model_dump()} for index, call in enumerate(calls)]


def chunk(
    *,
    job_id: str,
    model: str,
    delta: dict[str, Any],
    finish_reason: str | None = None,
    usage: Usage | None = None,
    logprobs: list[TokenLogprob] | None = None,
    index: int = 0,
) -> dict[str, Any]:
    """A ``chat.completion.chunk`` object (of choice ``index``); with ``usage``, the
    usage chunk (no choices)."""
    choice = {
        "index": index,
        "delta": delta,
        "logprobs": logprobs_block(logprobs),
        "finish_reason": finish_reason,
    }
    return stream_chunk("chat.completion.chunk", completion_id(job_id), model, choice, usage)


def logprobs_block(logprobs: list[TokenLogprob] | None) -> dict[str, Any] | None:
    """A choice's ``logprobs``: null unless the request asked for them."""
    if logprobs is None:
        return None
    return {"content": [lp.model_dump() for lp in logprobs], "refusal": None}
