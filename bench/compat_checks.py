"""What ``llmq bench compat``'s probes check a reply with, and the client they send with.

The checks of a reply's shape (:func:`check_completion`, :func:`read_stream`,
:func:`check_logprobs`...) are pure functions of the JSON a server sent, so they are
tested on hand-written replies; each raises :class:`ProbeFailed` saying what was wrong.
:class:`Api` is an ``httpx.Client`` on a server's base URL and the model to name.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx

Json = dict[str, Any]

FINISH_REASONS = frozenset({"stop", "length", "tool_calls", "content_filter"})
COUNT = [{"role": "user", "content": "Count from one to twenty in words, separated by commas."}]


class ProbeFailed(Exception):
    """The server's reply lacks the feature, or has the wrong shape; the message says how."""


def get(obj: Any, key: str) -> Any:
    """``obj[key]`` of a JSON object, else ``None`` (a key it lacks, or no object)."""
    return obj.get(key) if isinstance(obj, dict) else None


def require(condition: bool, what: str) -> None:
    """Raise :class:`ProbeFailed` with ``what`` unless ``condition`` holds."""
    if not condition:
        raise ProbeFailed(what)


@dataclass(frozen=True)
class Reply:
    """One HTTP answer: its status and JSON body (``None`` when the body is not JSON);
    for a stream, its ``data:`` chunks and whether it ended with ``[DONE]``."""

    status: int
    body: Any = None
    chunks: tuple[Json, ...] = ()
    done: bool = False
    text: str = ""


def error_message(reply: Reply) -> str:
    """The message of an error reply in OpenAI's shape (``{"error": {"message"}}``), else
    its text."""
    body = reply.body
    if isinstance(body, dict):
        error = get(body, "error")
        if isinstance(error, dict) and isinstance(get(error, "message"), str):
            return str(error["message"])
        if isinstance(get(body, "message"), str):
            return str(body["message"])
    return reply.text[:300]


def expect_ok(reply: Reply) -> Json:
    """The JSON object of a 200 reply; a non-200 fails the probe naming its status."""
    if reply.status != 200:
        raise ProbeFailed(f"HTTP {reply.status}: {error_message(reply)}")
    require(isinstance(reply.body, dict), "the body is not a JSON object")
    body: Json = reply.body
    return body


def check_error(reply: Reply, status: int, naming: str | None = None) -> None:
    """An error in OpenAI's shape: ``status``, ``{"error": {"message": ...}}``, and the
    message (or ``param``) names ``naming``."""
    require(reply.status == status, f"HTTP {reply.status}, not {status}")
    require(isinstance(reply.body, dict), "the error body is not a JSON object")
    error = get(reply.body, "error")
    require(isinstance(error, dict), "no error object in the body")
    message = get(error, "message")
    require(isinstance(message, str) and bool(message), "the error has no message")
    if naming is not None:
        named = naming in message or get(error, "param") == naming
        require(named, f"the error does not name {naming!r}: {message[:200]}")


def check_usage(usage: Any) -> Json:
    """``prompt_tokens``, ``completion_tokens`` and ``total_tokens`` that add up."""
    require(isinstance(usage, dict), "no usage object")
    counts = [usage.get(k) for k in ("prompt_tokens", "completion_tokens", "total_tokens")]
    require(all(isinstance(n, int) and n >= 0 for n in counts), f"usage counts: {usage}")
    adds_up = usage["total_tokens"] == usage["prompt_tokens"] + usage["completion_tokens"]
    require(adds_up, f"usage does not add up: {usage}")
    checked: Json = usage
    return checked


def check_completion(body: Json, *, n: int = 1) -> list[Json]:
    """A ``chat.completion``: id, created, model, ``n`` choices indexed 0..n-1, each an
    assistant message with a known finish reason, and usage; returns the choices."""
    require(get(body, "object") == "chat.completion", f"object is {body.get('object')!r}")
    require(isinstance(get(body, "id"), str) and bool(body["id"]), "no id")
    require(isinstance(get(body, "created"), int), "no created time")
    require(isinstance(get(body, "model"), str), "no model")
    choices = get(body, "choices")
    require(isinstance(choices, list), "no choices list")
    require(len(choices) == n, f"{len(choices)} choices, not {n}")
    require(sorted(get(c, "index") for c in choices) == list(range(n)), "choice indexes")
    for choice in choices:
        message = get(choice, "message")
        require(isinstance(message, dict), "a choice has no message")
        require(get(message, "role") == "assistant", f"role is {message.get('role')!r}")
        content = get(message, "content")
        require(content is None or isinstance(content, str), "content is not text")
        finish = get(choice, "finish_reason")
        require(finish in FINISH_REASONS, f"finish_reason is {finish!r}")
    check_usage(get(body, "usage"))
    return sorted(choices, key=lambda c: int(c["index"]))


def content_of(body: Json, index: int = 0) -> str:
    """The text of choice ``index`` of a checked ``chat.completion``."""
    content = check_completion(body, n=len(body["choices"]))[index]["message"]["content"]
    require(isinstance(content, str), "the message has no content")
    text: str = content
    return text


@dataclass
class ToolCallDeltas:
    """One tool call put together from its stream deltas."""

    id: str | None = None
    type: str | None = None
    name: str = ""
    arguments: str = ""


@dataclass
class Streamed:
    """What a checked chat stream carried, per choice index."""

    texts: dict[int, str] = field(default_factory=dict)
    finish: dict[int, str] = field(default_factory=dict)
    roles: dict[int, str] = field(default_factory=dict)
    logprobs: dict[int, list[Json]] = field(default_factory=dict)
    tool_calls: dict[int, dict[int, ToolCallDeltas]] = field(default_factory=dict)
    usage: Json | None = None


def read_stream(reply: Reply, *, n: int = 1, text_completion: bool = False) -> Streamed:
    """Check a stream's shape and put it together: a 200 that ends with ``[DONE]``,
    every chunk a ``chat.completion.chunk`` (``text_completion`` for /v1/completions)
    with one id, each of the ``n`` choice indexes given exactly one finish reason (the
    last chunk of its index), and at most one usage chunk (``choices: []``) at the end."""
    if reply.status != 200:
        raise ProbeFailed(f"HTTP {reply.status}: {error_message(reply)}")
    require(reply.done, "the stream did not end with [DONE]")
    require(bool(reply.chunks), "the stream carried no chunks")
    wanted = "text_completion" if text_completion else "chat.completion.chunk"
    ids = {get(chunk, "id") for chunk in reply.chunks}
    require(len(ids) == 1 and isinstance(next(iter(ids)), str), f"chunk ids: {ids}")
    out = Streamed()
    for position, chunk in enumerate(reply.chunks):
        require("error" not in chunk, f"an error chunk: {chunk.get('error')}")
        require(get(chunk, "object") == wanted, f"object is {chunk.get('object')!r}")
        choices = get(chunk, "choices")
        require(isinstance(choices, list), "a chunk has no choices list")
        if get(chunk, "usage") is not None:
            require(choices == [], "usage rides a chunk that has choices")
            require(position == len(reply.chunks) - 1, "the usage chunk is not the last")
            out.usage = check_usage(chunk["usage"])
        for choice in choices:
            _read_choice(choice, out, text_completion=text_completion)
    require(sorted(out.texts) == list(range(n)), f"choice indexes {sorted(out.texts)}, not {n}")
    require(sorted(out.finish) == list(range(n)), "a choice never got a finish_reason")
    return out


def _read_choice(choice: Json, out: Streamed, *, text_completion: bool) -> None:
    index = get(choice, "index")
    require(isinstance(index, int), "a chunk's choice has no index")
    require(index not in out.finish, f"choice {index} went on after its finish_reason")
    out.texts.setdefault(index, "")
    if text_completion:
        text = get(choice, "text")
        require(isinstance(text, str), "a text_completion chunk has no text")
        out.texts[index] += text
    else:
        delta = get(choice, "delta")
        require(isinstance(delta, dict), "a chunk's choice has no delta")
        if get(delta, "role") is not None:
            require(delta["role"] == "assistant", f"delta role {delta['role']!r}")
            require(index not in out.roles, "the role came twice")
            out.roles[index] = delta["role"]
        content = get(delta, "content")
        require(content is None or isinstance(content, str), "delta content is not text")
        out.texts[index] += content or ""
        for call in get(delta, "tool_calls") or []:
            _read_tool_call(call, out.tool_calls.setdefault(index, {}))
    logprobs = get(choice, "logprobs")
    if isinstance(logprobs, dict) and isinstance(get(logprobs, "content"), list):
        out.logprobs.setdefault(index, []).extend(logprobs["content"])
    finish = get(choice, "finish_reason")
    if finish is not None:
        require(finish in FINISH_REASONS, f"finish_reason is {finish!r}")
        out.finish[index] = finish


def _read_tool_call(call: Json, calls: dict[int, ToolCallDeltas]) -> None:
    position = get(call, "index")
    require(isinstance(position, int), "a tool call delta has no index")
    built = calls.setdefault(position, ToolCallDeltas())
    if get(call, "id"):
        require(built.id is None or built.id == call["id"], "a tool call's id changed")
        built.id = call["id"]
    if get(call, "type"):
        built.type = call["type"]
    function = get(call, "function") or {}
    built.name += get(function, "name") or ""
    built.arguments += get(function, "arguments") or ""


def check_logprobs(
    tokens: Any, text: str, *, top: int, completion_tokens: int | None, ended: bool = False
) -> None:
    """``logprobs.content``: one entry a generated token (when ``completion_tokens`` is
    known), the tokens spelling ``text`` (and an end token after it when ``ended``),
    each with a log probability <= 0 and ``top`` alternatives, greedy, so the first
    alternative is the token taken."""
    require(isinstance(tokens, list) and bool(tokens), "no logprobs.content")
    if completion_tokens is not None:
        counted = len(tokens) == completion_tokens
        require(counted, f"{len(tokens)} logprobs for {completion_tokens} tokens")
    spelled = [get(t, "token") or "" for t in tokens]
    # An answer that ended by itself (``ended``) may also score its end token, which
    # its text leaves out: vLLM's server does.
    spells = "".join(spelled) == text or (ended and "".join(spelled[:-1]) == text)
    require(spells, f"tokens {spelled!r} do not spell {text!r}")
    for token in tokens:
        logprob = get(token, "logprob")
        require(isinstance(logprob, int | float) and logprob <= 0, f"logprob {logprob!r}")
        alternatives = get(token, "top_logprobs")
        require(isinstance(alternatives, list), "no top_logprobs list")
        require(len(alternatives) == top, f"{len(alternatives)} top_logprobs, not {top}")
        # Greedy: the likeliest alternative is the token taken.
        if top:
            taken = get(alternatives[0], "token") == token["token"]
            require(taken, f"greedy, yet {token['token']!r} is not the likeliest")


def check_tool_call(call: Json, names: set[str]) -> Json:
    """A message's tool call: an id, type ``function``, one of ``names``, and arguments
    that parse to an object; returns the arguments."""
    require(isinstance(get(call, "id"), str) and bool(call["id"]), "a tool call has no id")
    require(get(call, "type") == "function", f"tool call type {call.get('type')!r}")
    function = get(call, "function")
    require(isinstance(function, dict), "a tool call has no function")
    require(get(function, "name") in names, f"tool call names {function.get('name')!r}")
    return parsed_object(get(function, "arguments"), "the tool call's arguments")


def parsed_object(text: Any, what: str) -> Json:
    """``text`` parsed as a JSON object."""
    require(isinstance(text, str), f"{what} are not text")
    try:
        value = json.loads(text)
    except ValueError as exc:
        raise ProbeFailed(f"{what} are not JSON: {text[:120]!r}") from exc
    require(isinstance(value, dict), f"{what} are not a JSON object")
    result: Json = value
    return result


def repeats(text: str) -> int:
    """Words of ``text`` that repeat an earlier one."""
    words = text.lower().replace(",", " ").replace(".", " ").split()
    return len(words) - len(set(words))


class Api:
    """An OpenAI-compatible server: ``client`` has its base URL and key; ``model`` is the
    name every request sends. Greedy answers are kept, so probes that compare against
    the same one ask for it once."""

    def __init__(self, client: httpx.Client, model: str) -> None:
        self.client = client
        self.model = model
        self._greedy: dict[str, Json] = {}

    def get(self, path: str) -> Reply:
        response = self.client.get(path)
        return _reply(response.status_code, response.text)

    def post(self, path: str, body: Json) -> Reply:
        response = self.client.post(path, json=body)
        return _reply(response.status_code, response.text)

    def stream(self, path: str, body: Json) -> Reply:
        """POST ``body`` with ``stream: true``; read its server-sent events to the end."""
        with self.client.stream("POST", path, json={**body, "stream": True}) as response:
            if response.status_code != 200:
                return _reply(response.status_code, response.read().decode(errors="replace"))
            return parse_events(response.status_code, response.iter_lines())

    def chat_body(self, fields: Json) -> Json:
        """A chat request: the counting question, 24 greedy tokens, then ``fields``."""
        return {
            "model": self.model,
            "messages": COUNT,
            "max_tokens": 24,
            "temperature": 0,
            **fields,
        }

    def chat(self, **fields: Any) -> Json:
        """A plain chat completion's body (a non-200 fails the probe)."""
        return expect_ok(self.post("/v1/chat/completions", self.chat_body(fields)))

    def chat_stream(self, *, n: int = 1, **fields: Any) -> Streamed:
        """A streamed chat completion of ``n`` choices, checked and put together."""
        body = self.chat_body({**fields, "n": n} if n != 1 else fields)
        return read_stream(self.stream("/v1/chat/completions", body), n=n)

    def greedy(self, **fields: Any) -> Json:
        """:meth:`chat`, asked once per distinct ``fields``."""
        return self.remember(json.dumps(fields, sort_keys=True), lambda: self.chat(**fields))

    def remember(self, key: str, fetch: Callable[[], Json]) -> Json:
        """``fetch()``'s answer, fetched once per ``key``; a failed fetch is not kept."""
        if key not in self._greedy:
            self._greedy[key] = fetch()
        return self._greedy[key]


def _reply(status: int, text: str) -> Reply:
    try:
        body = json.loads(text)
    except ValueError:
        body = None
    return Reply(status, body, text=text)


def parse_events(status: int, lines: Any) -> Reply:
    """A stream's ``data:`` lines as chunks (other SSE fields are skipped); ``done`` once
    ``data: [DONE]`` came (anything after it is ignored)."""
    chunks: list[Json] = []
    for line in lines:
        if not line.startswith("data:"):
            continue
        data = line.removeprefix("data:").strip()
        if data == "[DONE]":
            return Reply(status, chunks=tuple(chunks), done=True)
        chunks.append(json.loads(data))
    return Reply(status, chunks=tuple(chunks), done=False)
