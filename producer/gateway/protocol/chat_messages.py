"""A chat message as OpenAI sends it: what llmq refuses in one by name, and the llmq
form of one it serves (``schemas.requests`` validates that form)."""

from __future__ import annotations

from typing import Any

from pydantic_core import PydanticCustomError

# Keys of an OpenAI message, beyond role and content, that a client echoing an earlier
# answer back sends empty (the SDK's assistant message has them all).
_EMPTY_MESSAGE_KEYS = ("name", "tool_calls", "tool_call_id", "function_call", "refusal", "audio")
# The keys a message of a role may carry filled in: an assistant's calls, the id of the
# call a tool's message answers (and its tool's name, which the id already identifies).
_SERVED_MESSAGE_KEYS = {"assistant": ("tool_calls",), "tool": ("tool_call_id", "name")}


def check_message(index: int, message: object) -> None:
    """Refuse, by name, what a message asks for that llmq does not serve: keys other
    than role and content (unless empty), and content parts other than text."""
    if not isinstance(message, dict):
        return  # left for GenerationRequest, which says what a message must be
    served = _SERVED_MESSAGE_KEYS.get(str(message.get("role")), ())
    for key, value in message.items():
        if key in ("role", "content", *served):
            continue
        if key in _EMPTY_MESSAGE_KEYS and value in (None, "", []):
            continue
        problem = (
            "llmq does not serve messages[{index}].{key}"
            if key in _EMPTY_MESSAGE_KEYS
            else "messages[{index}].{key} is not a field of a chat message"
        )
        raise PydanticCustomError("unserved_field", problem, {"index": index, "key": key})
    content = message.get("content")
    if isinstance(content, list):
        for number, part in enumerate(content):
            kind = part.get("type", "text") if isinstance(part, dict) else "a non-object"
            if kind != "text":
                raise PydanticCustomError(
                    "unserved_field",
                    "llmq serves text content parts only: messages[{index}].content[{number}] "
                    "is {kind}",
                    {"index": index, "number": number, "kind": str(kind)},
                )


def llmq_message(message: dict[str, Any]) -> dict[str, Any]:
    content = message.get("content")
    if isinstance(content, list):
        # OpenAI's content parts: llmq serves text only (others are refused above), so
        # join the text parts. A part whose text is not a string is passed on as it
        # is, for validation to refuse.
        texts = [part.get("text", "") for part in content if isinstance(part, dict)]
        if all(isinstance(text, str) for text in texts):
            content = "".join(texts)
    converted = {"role": message.get("role"), "content": content}
    if message.get("tool_calls"):
        converted["tool_calls"] = message["tool_calls"]
        # OpenAI's assistant message that only calls tools has no content.
        converted["content"] = content if content is not None else ""
    if message.get("tool_call_id") is not None:
        converted["tool_call_id"] = message["tool_call_id"]
    return converted
