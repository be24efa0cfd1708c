"""Tools (OpenAI's function calling): the tools a request offers, how the model is
told about them, the constraint that forces a call, and the calls read back out of
an answer.

``tool_choice`` says what the answer may be:

- a named function (``{"type": "function", "function": {"name": ...}}``): the answer
  is that function's arguments, a JSON object the engine constrains to the function's
  ``parameters`` schema;
- ``"required"``: the answer is a JSON array of one ``{"name", "parameters"}`` object
  whose ``name`` is one of the tools and whose ``parameters`` match that tool's schema
  (the form vLLM's own server forces; llmq allows one call per answer);
- ``"auto"`` (the default when tools are given): the model is told about the tools
  and answers freely; an answer that is a tool call in hermes form
  (``<tool_call>{"name": ..., "arguments": {...}}</tool_call>``) or a bare JSON object
  with a tool's ``name`` and ``arguments`` is read as that call, anything else is text.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

MAX_TOOLS = 128
"""Most tools one request may offer (OpenAI's bound)."""
TOOL_NAME_PATTERN = r"^[A-Za-z0-9_-]{1,64}$"


class FunctionSpec(BaseModel):
    """A function the model may call: its name, what it does, its arguments' schema."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(pattern=TOOL_NAME_PATTERN)
    description: str | None = Field(default=None, exclude_if=lambda value: value is None)
    parameters: dict[str, Any] | None = Field(default=None, exclude_if=lambda value: value is None)
    strict: bool | None = Field(
        default=None,
        exclude_if=lambda value: value is None,
        description="honoured whatever its value where the call is forced (the engine "
        "constrains the arguments to the schema); not enforced under auto",
    )

    def arguments_schema(self) -> dict[str, Any]:
        """The arguments' JSON schema; a function without one takes any object."""
        return self.parameters or {"type": "object", "properties": {}}


class ToolSpec(BaseModel):
    """One entry of a request's ``tools``."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["function"] = "function"
    function: FunctionSpec


class NamedFunction(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str


class NamedToolChoice(BaseModel):
    """``tool_choice`` naming the function the answer must call."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    type: Literal["function"] = "function"
    function: NamedFunction


ToolChoice = Literal["auto", "required"] | NamedToolChoice
"""What a stored request's ``tool_choice`` may be ("none" is a request without tools)."""


class FunctionCall(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str
    arguments: str
    """The arguments as a JSON text (OpenAI's form)."""


class ToolCall(BaseModel):
    """A call the model made, as OpenAI's ``message.tool_calls`` holds it."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1, max_length=200)
    type: Literal["function"] = "function"
    function: FunctionCall


class ToolUse(BaseModel):
    """A request's tools and its ``tool_choice``: what the model is told and what its
    answer may be."""

    model_config = ConfigDict(frozen=True)

    tools: tuple[ToolSpec, ...] = Field(min_length=1, max_length=MAX_TOOLS)
    choice: ToolChoice = "auto"
    parallel: bool = True
    """OpenAI's ``parallel_tool_calls``: an answer may make several calls (else one)."""

    @property
    def mode(self) -> Literal["auto", "required", "named"]:
        return "named" if isinstance(self.choice, NamedToolChoice) else self.choice

    def named(self) -> FunctionSpec | None:
        """The function a named ``tool_choice`` forces, else None."""
        if not isinstance(self.choice, NamedToolChoice):
            return None
        return self.function(self.choice.function.name)

    def function(self, name: str) -> FunctionSpec | None:
        return next((t.function for t in self.tools if t.function.name == name), None)

    def check(self) -> None:
        """Raise ``ValueError`` for duplicate names or a named choice not among the tools."""
        names = [tool.function.name for tool in self.tools]
        if len(set(names)) != len(names):
            raise ValueError("tools must have distinct function names")
        if isinstance(self.choice, NamedToolChoice) and self.named() is None:
            raise ValueError(
                f"tool_choice names {self.choice.function.name!r}, which is not among the tools"
            )

    def forced_schema(self) -> dict[str, Any] | None:
        """The JSON schema the engine constrains the answer to, None under auto.

        Named: the function's arguments schema. Required: an array of one or more
        ``{"name", "parameters"}`` objects, each for one of the tools, of one only
        where calls are not parallel (the schema vLLM's server builds).
        """
        named = self.named()
        if named is not None:
            return named.arguments_schema()
        if self.choice != "required":
            return None
        return {
            "type": "array",
            "minItems": 1,
            **({} if self.parallel else {"maxItems": 1}),
            "items": {
                "type": "object",
                "anyOf": [
                    {
                        "properties": {
                            "name": {"type": "string", "enum": [tool.function.name]},
                            "parameters": tool.function.arguments_schema(),
                        },
                        "required": ["name", "parameters"],
                    }
                    for tool in self.tools
                ],
            },
        }

    def instruction(self) -> str:
        """What a model whose chat template knows no tools is told, as a system message."""
        listed = "\n".join(
            json.dumps(tool.function.model_dump(exclude={"strict"}), ensure_ascii=False)
            for tool in self.tools
        )
        head = f"You have these tools (each one's arguments follow its JSON schema):\n{listed}\n"
        named = self.named()
        if named is not None:
            return (
                f"{head}Call the tool {named.name}: answer with only the JSON object of its "
                "arguments."
            )
        call = '{"name": <the tool\'s name>, "parameters": <its arguments>}'
        if self.choice == "required" and self.parallel:
            return (
                f"{head}Call one or more of the tools: answer with only a JSON array "
                f"holding one object per call, [{call}, ...]."
            )
        if self.choice == "required":
            return (
                f"{head}Call one of the tools: answer with only a JSON array holding one "
                f"object, [{call}]."
            )
        several = " (one block per call, if you call several)" if self.parallel else ""
        return (
            f"{head}To call a tool, answer with only{several}:\n<tool_call>\n"
            '{"name": <the tool\'s name>, "arguments": <its arguments as a JSON object>}\n'
            "</tool_call>\nIf no tool is needed, answer the user in plain text."
        )

    def parse(self, text: str, *, job_id: str) -> ToolAnswer:
        """The calls ``text`` (a whole answer) makes, with the text beside them.

        Named: the text is the arguments, whatever they are (an answer cut off by
        ``max_tokens`` gives arguments cut off too, as vLLM's server does). Required:
        the array's calls; text that is not such an array is returned as content.
        Auto: calls in hermes form or one as a bare JSON object naming a tool; else
        text. Without parallel calls only the first call is kept.
        """
        named = self.named()
        if named is not None:
            return ToolAnswer(content=None, calls=(_call(job_id, 0, named.name, text.strip()),))
        if self.choice == "required":
            answer = self._parse_required(text, job_id)
        else:
            answer = self._parse_auto(text, job_id)
        return answer if self.parallel else ToolAnswer(answer.content, answer.calls[:1])

    def _parse_required(self, text: str, job_id: str) -> ToolAnswer:
        try:
            items = json.loads(text)
        except ValueError:
            return ToolAnswer(content=text, calls=())
        calls: list[ToolCall] = []
        for item in items if isinstance(items, list) else [items]:
            call = self._call_from(item, job_id, len(calls), arguments_key="parameters")
            if call is None:
                return ToolAnswer(content=text, calls=())
            calls.append(call)
        return ToolAnswer(content=None, calls=tuple(calls)) if calls else ToolAnswer(text, ())

    def _parse_auto(self, text: str, job_id: str) -> ToolAnswer:
        tagged = _TAGGED.findall(text)
        if tagged:
            calls: list[ToolCall] = []
            for body in tagged:
                call = self._call_from(_json_or_none(body), job_id, len(calls))
                if call is not None:
                    calls.append(call)
            if calls:
                before = text[: text.index("<tool_call>")].strip()
                return ToolAnswer(content=before or None, calls=tuple(calls))
            return ToolAnswer(content=text, calls=())
        call = self._call_from(_json_or_none(_unfenced(text)), job_id, 0)
        if call is not None:
            return ToolAnswer(content=None, calls=(call,))
        return ToolAnswer(content=text, calls=())

    def _call_from(
        self, item: object, job_id: str, index: int, *, arguments_key: str = "arguments"
    ) -> ToolCall | None:
        """A call from ``{"name": ..., "arguments": {...}}`` (``parameters`` too, the
        form several models use), when it names one of the tools."""
        if not isinstance(item, dict) or not isinstance(item.get("name"), str):
            return None
        if self.function(item["name"]) is None:
            return None
        keys = (arguments_key, "parameters", "arguments")
        arguments: Any = next((item[key] for key in keys if key in item), {})
        if isinstance(arguments, str):
            parsed = _json_or_none(arguments)
            arguments = parsed if isinstance(parsed, dict) else None
        if not isinstance(arguments, dict):
            return None
        return _call(job_id, index, item["name"], json.dumps(arguments, ensure_ascii=False))


@dataclass(frozen=True)
class ToolAnswer:
    """An answer read for tool calls: ``calls`` (maybe none) and the text beside them."""

    content: str | None
    calls: tuple[ToolCall, ...]


def call_id(job_id: str, index: int) -> str:
    """A call's id: the same for every read of the same job (a stream, its resume, the
    result), so a client that saw it once sees it again."""
    return f"call_{job_id}" if index == 0 else f"call_{job_id}_{index}"


def _call(job_id: str, index: int, name: str, arguments: str) -> ToolCall:
    return ToolCall(
        id=call_id(job_id, index), function=FunctionCall(name=name, arguments=arguments)
    )


_TAGGED = re.compile(r"<tool_call>\s*(.*?)\s*(?:</tool_call>|$)", re.DOTALL)
_FENCED = re.compile(r"^```(?:json)?\s*(.*?)\s*```$", re.DOTALL)


def _unfenced(text: str) -> str:
    text = text.strip()
    fenced = _FENCED.match(text)
    return fenced.group(1) if fenced else text


def _json_or_none(text: str) -> Any:
    try:
        return json.loads(text)
    except ValueError:
        return None


def may_become_call(text: str) -> bool:
    """Whether a streamed auto answer that begins with ``text`` may still turn out to
    be a tool call (so its text is held until the end), rather than plain text."""
    start = text.lstrip()
    tag = "<tool_call>"
    return (
        not start
        or start.startswith(("{", "```"))
        or start.startswith(tag)
        or tag.startswith(start)
        or "```".startswith(start)
    )


def arguments_object(arguments: str) -> Any:
    """A call's arguments as the object a chat template or prompt shows: the parsed
    JSON where it parses, else the text."""
    parsed = _json_or_none(arguments)
    return parsed if parsed is not None else arguments


def plain_messages(messages: list[dict[str, Any]], tools: ToolUse | None) -> list[dict[str, str]]:
    """``messages`` with tools written out as text, for a chat template that knows only
    roles and text: the tools' instruction as (or after) the system message, an
    assistant's calls in hermes form, a tool's result as a user turn in
    ``<tool_response>`` tags."""
    plain: list[dict[str, str]] = []
    for message in messages:
        role = str(message["role"])
        content = str(message.get("content") or "")
        if role == "assistant" and message.get("tool_calls"):
            calls = [
                "<tool_call>\n"
                + json.dumps(
                    {
                        "name": call["function"]["name"],
                        "arguments": arguments_object(call["function"]["arguments"]),
                    },
                    ensure_ascii=False,
                )
                + "\n</tool_call>"
                for call in message["tool_calls"]
            ]
            content = "\n".join([content, *calls] if content.strip() else calls)
        elif role == "tool":
            role, content = "user", f"<tool_response>\n{content}\n</tool_response>"
        plain.append({"role": role, "content": content})
    if tools is None:
        return plain
    instruction = tools.instruction()
    if plain and plain[0]["role"] == "system":
        first = plain[0]["content"]
        return [{"role": "system", "content": f"{first}\n\n{instruction}"}, *plain[1:]]
    return [{"role": "system", "content": instruction}, *plain]


def stored_tool_use(request: Mapping[str, Any]) -> ToolUse | None:
    """The tools of a stored request (a job row's ``request``), None without any."""
    if not request.get("tools"):
        return None
    return ToolUse.model_validate(
        {
            "tools": request["tools"],
            "choice": request.get("tool_choice") or "auto",
            "parallel": request.get("parallel_tool_calls", True),
        }
    )


def template_messages(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` for a chat template with a tools section: each call's arguments as
    an object, as vLLM's server hands them to templates (which write them with
    ``tojson``)."""
    return [
        {**message, "tool_calls": [_template_call(c) for c in message["tool_calls"]]}
        if message.get("tool_calls")
        else message
        for message in messages
    ]


def _template_call(call: dict[str, Any]) -> dict[str, Any]:
    function = call["function"]
    return {**call, "function": {**function, "arguments": arguments_object(function["arguments"])}}
