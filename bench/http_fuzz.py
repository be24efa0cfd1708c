"""Fuzzing the real doors: the gateway over HTTP, ``Client.submit``, and cross-key access.

:mod:`bench.fuzz` checks that pydantic refuses bad requests cleanly. Here the
same kind of garbage goes through everything behind the parsers:

* :func:`fuzz_gateway` sends malformed, odd and hostile requests over real HTTP to a
  running ``llmq gateway`` (bodies, headers, paths, methods, ``Last-Event-ID``, other
  keys' job ids) and counts the answers a client must never get: a 5xx other than 503,
  an error event of the server's own making inside a stream, or a connection the
  server dropped without answering.
* :func:`fuzz_submit` calls ``Client.submit`` with bad requests and odd enqueue
  options, so routing, prompt resolution, the length check and the database all see
  them; anything raised that is not an ``LlmqError`` is a crash.
* :func:`cross_key_probe` has key B read, resume, cancel and idempotency-collide with
  key A's jobs, and counts every attempt that saw or touched them.

Every case is drawn from a seeded ``random.Random``: the same seed and inputs send the
same requests, so a failure found once can be replayed.
"""

from __future__ import annotations

import contextlib
import json
import random
import time
import uuid
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, cast

import httpx
from sqlalchemy import select

from bench.fuzz import (
    HUGE_TEXT_CHARS,
    ODD_NUMBERS,
    ODD_STRINGS,
    random_bad_request,
    random_json_value,
    random_text,
    valid_request,
)
from producer.client import Client
from producer.gateway.keys import authenticate
from producer.submission import RequestLike
from schemas.errors import BrokerUnavailable, DatabaseUnavailable, LlmqError
from schemas.jobs import JobStatus
from schemas.tables import Job

CHAT = "/v1/chat/completions"
MAX_FAILURES_KEPT = 50
"""Failures are described one line each; a run keeps the first this many."""

# An error inside a 200 stream that a job's own failure explains (it was cancelled,
# or its engine failed) rather than the gateway.
JOB_ERROR_CODES = frozenset({"job_failed"})

# Bytes a header value may hold (RFC 9110 field-vchar and inner spaces); bytes above
# 0x7f are legal and are how a client sends text that is not UTF-8.
_VCHAR = bytes(range(0x21, 0x7F)) + bytes(range(0x80, 0x100))
# Digits Python's str.isdigit() accepts that int() refuses, and other lookalikes a
# latin-1 header can carry.
ODD_DIGITS = ("\u00b2", "\u00b3", "\u00b9", "\u00bc", "\u00bd", "\uff11", "\u0663")


# Results -------------------------------------------------------------------------


@dataclass
class HttpFuzzReport:
    """What the gateway answered to ``http_fuzz_cases`` hostile requests.

    ``http_5xx`` (must be 0) counts answers of 500 and above other than 503, plus
    server errors reported inside a 200 stream; ``transport_errors`` (must be 0)
    counts requests the server dropped without an answer. ``http_503`` is counted
    apart: no warm worker for an interactive request, or a dependency down, are
    legitimate; ``http_503_codes`` says which (``backend_unavailable`` while Redis and
    the database are up means bad input reached them unchecked). ``timeouts`` are
    requests still waiting after ``timeout_s`` (a batch job queued with no worker);
    ``job_failed`` are answers about a job that ended in error (a resumed job that was
    cancelled, say), which the gateway reports as OpenAI does, with a 500.
    """

    http_fuzz_cases: int = 0
    http_5xx: int = 0
    http_503: int = 0
    transport_errors: int = 0
    timeouts: int = 0
    job_failed: int = 0
    statuses: dict[int, int] = field(default_factory=dict)
    http_503_codes: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)

    def fail(self, line: str) -> None:
        if len(self.failures) < MAX_FAILURES_KEPT:
            self.failures.append(line)


@dataclass
class SubmitFuzzReport:
    """``Client.submit`` over ``submit_fuzz_cases`` bad inputs.

    ``submit_crashes`` (must be 0) counts exceptions that are not ``LlmqError``s (and
    ``LlmqError``s without a message); ``submit_unavailable`` (must be 0 while Redis
    and the database are up) counts bad input refused as ``BrokerUnavailable`` or
    ``DatabaseUnavailable``, which tells a caller to retry what can never succeed;
    ``accepted`` jobs were cancelled at once;
    ``refused`` counts the ``LlmqError`` classes that refused the rest.
    """

    submit_fuzz_cases: int = 0
    submit_crashes: int = 0
    submit_unavailable: int = 0
    accepted: int = 0
    refused: dict[str, int] = field(default_factory=dict)
    failures: list[str] = field(default_factory=list)


@dataclass
class CrossKeyReport:
    """Key B's attempts on key A's jobs; ``cross_key_reads`` (must be 0) succeeded."""

    cross_key_attempts: int = 0
    cross_key_reads: int = 0
    failures: list[str] = field(default_factory=list)

    def attempt(self, succeeded: bool, what: str) -> None:
        self.cross_key_attempts += 1
        if succeeded:
            self.cross_key_reads += 1
            self.failures.append(what)


# HTTP cases ----------------------------------------------------------------------


@dataclass(frozen=True)
class HttpCase:
    """One raw request: method, path (percent-encoded as sent), headers and body."""

    kind: str
    method: str
    path: str
    headers: tuple[tuple[bytes, bytes], ...]
    body: bytes = b""
    authenticated: bool = True
    """False when the case sends a missing or wrong key: such cases go last, because
    an address with too many failed logins is refused for a minute."""
    streamed: bool = False
    """True when the answer may be a stream: its events are waited for only briefly
    (a queued job with no worker sends none)."""

    def describe(self) -> str:
        head = " ".join(f"{k.decode('latin-1')}: {v[:60]!r}" for k, v in self.headers)
        return (
            f"[{self.kind}] {self.method} {self.path[:120]} {head[:300]} body={self.body[:200]!r}"
        )


@dataclass(frozen=True)
class _Inputs:
    api_keys: Sequence[str]
    other_job_ids: Sequence[str]
    own_job_ids: Sequence[str]


def http_cases(
    n: int,
    seed: int,
    *,
    api_keys: Sequence[str],
    other_job_ids: Sequence[str] = (),
    own_job_ids: Sequence[str] = (),
) -> list[HttpCase]:
    """``n`` hostile requests drawn from ``seed``; the same inputs give the same cases.

    ``api_keys`` are valid secrets the cases authenticate with (rotated, so no key
    meets its rate limit early); ``other_job_ids`` belong to another key, which must
    never see them; ``own_job_ids`` belong to the first key and let ``Last-Event-ID``
    reach a real stream. Cases with bad credentials come last.
    """
    if not api_keys:
        raise ValueError("fuzzing the gateway needs at least one valid API key")
    rng = random.Random(f"{seed}:http")
    inputs = _Inputs(api_keys, other_job_ids, own_job_ids)
    kinds = [kind for kind, weight in CASE_KINDS for _ in range(weight)]
    cases = [rng.choice(kinds)(rng, inputs) for _ in range(n)]
    return [c for c in cases if c.authenticated] + [c for c in cases if not c.authenticated]


def _random_id(rng: random.Random) -> str:
    """A job id no job has, drawn from the seed."""
    return rng.randbytes(16).hex()


def _auth(rng: random.Random, inputs: _Inputs) -> tuple[bytes, bytes]:
    return b"authorization", f"Bearer {rng.choice(inputs.api_keys)}".encode()


def _json_bytes(value: object) -> bytes:
    """JSON as a client would send it; NaN and infinities as Python writes them."""
    if isinstance(value, bytes):
        return value
    try:
        return json.dumps(value, default=repr).encode()
    except (RecursionError, ValueError):
        return repr(value).encode("utf-8", "surrogatepass")


def _gateway_body(rng: random.Random) -> dict[str, Any]:
    body: dict[str, Any] = {"model": rng.choice(("auto", "small", "small", "medium", "large"))}
    body.update(valid_request())
    if rng.random() < 0.5:
        body["stream"] = True
    # Interactive requests stop at "no warm worker" (503); batch ones go on to the
    # database and the queue, streamed so that they answer at once.
    choice = rng.random()
    if choice < 0.25:
        body["priority"] = "batch"
        body["stream"] = True
    elif choice < 0.4:
        body["priority"] = "interactive"
    return body


def _chat(
    kind: str,
    rng: random.Random,
    inputs: _Inputs,
    body: bytes,
    *extra: tuple[bytes, bytes],
    content_type: bytes | None = b"application/json",
) -> HttpCase:
    headers = [_auth(rng, inputs), *extra]
    if content_type is not None:
        headers.append((b"content-type", content_type))
    return HttpCase(kind, "POST", CHAT, tuple(headers), body, streamed=_asks_to_stream(body))


def _asks_to_stream(body: bytes) -> bool:
    try:
        parsed = json.loads(body)
    except (ValueError, RecursionError):
        return False
    return isinstance(parsed, dict) and parsed.get("stream") is True


def _streamed_if_batch(body: object, headers: Sequence[tuple[bytes, bytes]]) -> object:
    # A batch job asked for without a stream waits for a worker: stream it instead, so
    # the case answers at once (its headers) rather than after the client's timeout.
    batch = any(name == b"x-priority" and b"batch" in value.lower() for name, value in headers)
    if isinstance(body, dict) and (batch or body.get("priority") == "batch"):
        body["stream"] = True
    return body


def _mutated_body(rng: random.Random, inputs: _Inputs) -> HttpCase:
    payload = random_bad_request(rng)
    if isinstance(payload, dict):
        payload = {"model": rng.choice(("auto", "small")), **payload}
        payload = _streamed_if_batch(payload, ())
    return _chat("mutated_body", rng, inputs, _json_bytes(payload))


def _openai_fields(rng: random.Random, inputs: _Inputs) -> HttpCase:
    body = _gateway_body(rng)
    odd: Callable[[], object] = lambda: rng.choice(  # noqa: E731 - a local shorthand
        (random_json_value(rng, depth=1), rng.choice(ODD_NUMBERS), rng.choice(ODD_STRINGS))
    )
    for _ in range(rng.randint(1, 3)):
        name = rng.choice(
            (
                "model",
                "stream",
                "stream_options",
                "n",
                "max_completion_tokens",
                "max_tokens",
                "priority",
                "system_prompt",
                "stop",
                "metadata",
                "messages",
            )
        )
        body[name] = rng.choice(
            (
                odd(),
                {
                    "model": ("AUTO", "small ", "gpt-4o", "", None, 1, ["auto"]),
                    "stream": ("true", 1, 0, None, "yes", [True]),
                    "stream_options": ({"include_usage": "yes"}, {"include_usage": None}, [], 1),
                    "n": (0, 2, "1", 1.0, -1, None),
                    "max_completion_tokens": (0, 1, 10**9, "8", -5, 32_769),
                    "max_tokens": (0, 1, 10**9, "8", -5, 32_769, 2**64),
                    "priority": ("urgent", "BATCH", "", None, 1, "batch "),
                    "system_prompt": ("support", "support@1", "support@99", "nope", "../x"),
                    "stop": ("", [""], ["a"] * 9, [None], "\x00"),
                    "metadata": ({"k": float("nan")}, {"k": 2**70}, {"\x00": "v"}, {"k": "\ud800"}),
                    "messages": (
                        [{"role": "user", "content": [{"type": "text", "text": "hi"}] * 3}],
                        [{"role": "user", "content": [{"type": "text", "text": None}]}],
                        [{"role": "user", "content": [{"type": "text"}]}],
                        [{"role": "user", "content": [1, "x", None]}],
                        [{"role": "user", "content": []}],
                        [{"role": "user"}],
                        [{"content": "hi"}],
                        [{}],
                        [{"role": "user", "content": "hi", "tool_calls": [{}]}],
                    ),
                }[name],
            )
        )
        if isinstance(body[name], tuple):
            body[name] = rng.choice(body[name])
    return _chat("openai_fields", rng, inputs, _json_bytes(_streamed_if_batch(body, ())))


def _malformed_json(rng: random.Random, inputs: _Inputs) -> HttpCase:
    valid = json.dumps(_gateway_body(rng))
    body = rng.choice(
        (
            valid[: rng.randrange(len(valid))],
            valid.replace('"', "'"),
            valid + ",",
            valid + valid,
            valid.replace("}", ",}", 1),
            "",
            "null",
            "[]",
            '"text"',
            "1e999999",
            "NaN",
            "-Infinity",
            '{"model": "auto", "messages": [{"role": "user", "content": "\\ud800"}]}',
            '{"model": "auto", "messages": [{"role": "user", "content": "\\u0000"}]}',
            '{"model": "auto", "model": "small", "messages": []}',
            '{"model": "auto", "messages": [{"role": "user", "content": "hi"}], "seed": 1'
            + "0" * 5000
            + "}",
            "{" * 10 + "}" * 9,
            random_text(rng, max_chars=200),
        )
    )
    content_type = rng.choice(
        (
            b"application/json",
            b"application/json; charset=utf-8",
            b"application/vnd.api+json",
            b"application/json; charset=latin-1",
            None,
        )
    )
    encoded = body.encode("utf-8", "surrogatepass")
    return _chat("malformed_json", rng, inputs, encoded, content_type=content_type)


def _not_utf8(rng: random.Random, inputs: _Inputs) -> HttpCase:
    valid = _gateway_body(rng)
    valid["messages"] = [{"role": "user", "content": "héllo wörld 漢字"}]
    text = json.dumps(valid, ensure_ascii=False)
    body = rng.choice(
        (
            rng.randbytes(rng.randrange(1, 512)),
            text.encode("latin-1", "replace"),
            text.encode("utf-16"),
            text.encode("utf-32"),
            b"\xef\xbb\xbf" + text.encode(),
            text.encode().replace(b"\xc3", b"\xff"),
            b'{"model": "auto", "messages": [{"role": "user", "content": "\xff\xfe"}]}',
            b'{"model": "\x80", "messages": []}',
            b"\x00" * 64,
        )
    )
    content_type = rng.choice((b"application/json", b"text/plain", b"application/octet-stream"))
    return _chat("not_utf8", rng, inputs, body, content_type=content_type)


def _huge(rng: random.Random, inputs: _Inputs) -> HttpCase:
    body = _gateway_body(rng)
    choice = rng.randrange(7)
    if choice == 0:
        body["messages"] = [
            {"role": "user", "content": "x" * rng.choice((100_001, HUGE_TEXT_CHARS))}
        ]
    elif choice == 1:
        body["messages"] = [{"role": "user", "content": "hi"}] * rng.choice((257, 513, 5000))
    elif choice == 2:
        body["messages"] = [{"role": "user", "content": "word " * 20_000}]  # fits, too long
    elif choice == 3:
        body["metadata"] = {f"k{i}": "v" * 100 for i in range(rng.choice((65, 3000)))}
    elif choice == 4:
        body["stop"] = ["x" * 10_000] * 8
    elif choice == 5:
        body["padding"] = "p" * rng.choice((900_000, 1_100_000, 2_000_000))  # about the cap
    else:
        body["system_prompt"] = "a" * 100_000
    return _chat("huge", rng, inputs, _json_bytes(body))


def _deeply_nested(rng: random.Random, inputs: _Inputs) -> HttpCase:
    depth = rng.choice((100, 1_000, 10_000, 200_000))
    where = rng.choice(("metadata", "messages", "stop", "body", "content", "stream_options"))
    inner = "[" * depth + "]" * depth if rng.random() < 0.5 else '{"k":' * depth + "1" + "}" * depth
    if where == "body":
        text = inner
    elif where == "content":
        text = f'{{"model":"auto","messages":[{{"role":"user","content":{inner}}}]}}'
    else:
        text = f'{{"model":"auto","messages":[{{"role":"user","content":"hi"}}],"{where}":{inner}}}'
    return _chat("deeply_nested", rng, inputs, text.encode())


def _header_value(rng: random.Random, *, max_len: int = 64) -> bytes:
    raw = bytes(rng.choice(_VCHAR) for _ in range(rng.randrange(1, max_len + 1)))
    return raw.strip(b" \t")


def _odd_headers(rng: random.Random, inputs: _Inputs) -> HttpCase:
    body = _json_bytes(_gateway_body(rng))
    extra: list[tuple[bytes, bytes]] = []
    choice = rng.randrange(8)
    if choice == 0:  # one oversized header, below and above what the server reads
        extra.append((b"x-padding", b"a" * rng.choice((4_000, 8_000, 15_000, 40_000))))
    elif choice == 1:  # many headers
        extra += [(f"x-h{i}".encode(), b"v") for i in range(rng.choice((100, 500)))]
    elif choice == 2:  # odd names and values, non-UTF-8 included
        name = "".join(
            rng.choice("abcdefghijklmnopqrstuvwxyz-_!#$%&'*+.^`|~0123456789")
            for _ in range(rng.randrange(1, 40))
        )
        extra.append((name.encode(), _header_value(rng, max_len=300) or b"x"))
    elif choice == 3:  # a second Authorization, or two keys in one
        extra.append(_auth(rng, inputs) if rng.random() < 0.5 else (b"authorization", b"Bearer x"))
    elif choice == 4:  # content types that are not JSON
        extra.append(
            (
                b"content-type",
                rng.choice(
                    (
                        b"text/plain",
                        b"application/x-www-form-urlencoded",
                        b"multipart/form-data; boundary=zzz",
                        b"application/",
                        b"/json",
                        b";;;",
                        b"application/json; charset=\xff",
                        b"application/json; boundary=" + b"b" * 5000,
                        _header_value(rng),
                    )
                ),
            )
        )
        return HttpCase("odd_headers", "POST", CHAT, (_auth(rng, inputs), *extra), body)
    elif choice == 5:
        extra.append((b"accept", rng.choice((b"text/event-stream", b"*/*;q=garbage", b"\xff"))))
        extra.append((b"accept-encoding", rng.choice((b"gzip", b"br, zstd", b"identity;q=0"))))
    elif choice == 6:
        extra.append((b"expect", rng.choice((b"100-continue", b"nonsense"))))
    else:
        extra.append((b"host", rng.choice((b"evil.example", b"\xff", b"a" * 300, b"[::1"))))
    return _chat("odd_headers", rng, inputs, body, *extra)


def _odd_last_event_id(rng: random.Random, inputs: _Inputs) -> HttpCase:
    owned = list(inputs.own_job_ids) or [_random_id(rng)]
    others = list(inputs.other_job_ids) or [_random_id(rng)]
    job = rng.choice((rng.choice(owned), rng.choice(owned), rng.choice(others), _random_id(rng)))
    seq = rng.choice(
        (
            "0",
            "1",
            "-1",
            "+1",
            " 1",
            "1.5",
            "1e3",
            "99999999999999999999999",
            str(2**63),
            str(2**63 - 1),
            str(2**31),
            "0" * 300 + "1",
            "",
            "x",
            *ODD_DIGITS,
        )
    )
    value = rng.choice(
        (
            f"{job}.{seq}",
            f"{job}.{seq}",
            f"{job}.{seq}",
            f"{job.upper()}.0",
            f"{job}",
            f".{seq}",
            f"{job}..0",
            f"{job}.0.0",
            f"{job} .0",
            f"x{job}.0",
            f"%00.{seq}",
            "\x7f.1",
            "." * 200,
            "a" * 5000 + ".1",
            random_text(rng),
        )
    )
    encoded = value.encode("latin-1", "replace").strip(b" \t")
    encoded = bytes(b for b in encoded if b >= 0x20 and b != 0x7F) or b"."
    body = _gateway_body(rng)
    if rng.random() < 0.7:
        body["stream"] = True
    return _chat("last_event_id", rng, inputs, _json_bytes(body), (b"last-event-id", encoded))


def _odd_priority_or_idempotency(rng: random.Random, inputs: _Inputs) -> HttpCase:
    headers: list[tuple[bytes, bytes]] = []
    if rng.random() < 0.6:
        headers.append(
            (
                b"x-priority",
                rng.choice(
                    (
                        b"batch",
                        b"BATCH",
                        b"Batch",
                        b"interactive",
                        b"urgent",
                        b"0",
                        b"-1",
                        b"batch, interactive",
                        b"b\xe4tch",
                        b"\xff\xfe",
                        b"a" * 8000,
                        _header_value(rng),
                    )
                ),
            )
        )
    if rng.random() < 0.6 or not headers:
        headers.append(
            (
                b"idempotency-key",
                rng.choice(
                    (
                        b"k",
                        b"order-1",
                        b"order-1",
                        b"a" * 200,
                        b"a" * 201,
                        b"a" * 10_000,
                        b"caf\xe9",
                        b"\xff\xfe\xfd",
                        b"\xc3\x28",
                        b"null",
                        _header_value(rng, max_len=250),
                    )
                ),
            )
        )
    body = _gateway_body(rng)
    if rng.random() < 0.5:
        body["messages"] = [{"role": "user", "content": random_text(rng) or "x"}]
    body = cast(dict[str, Any], _streamed_if_batch(body, headers))
    return _chat("priority_idempotency", rng, inputs, _json_bytes(body), *headers)


def _bad_auth(rng: random.Random, inputs: _Inputs) -> HttpCase:
    key = rng.choice(inputs.api_keys)
    value = rng.choice(
        (
            None,
            b"",
            b"Bearer",
            b"Bearer ",
            b"Bearer  \t",
            b"bearer " + key.encode() + b"x",
            b"Bearer " + key.encode()[:-1],
            b"Bearer " + key.encode().upper(),
            b"Basic dXNlcjpwYXNz",
            b"Token " + key.encode(),
            b"Bearer " + b"\xff" * 40,
            b"Bearer \xc3\x28\xa0\xa1",
            b"Bearer " + b"k" * 10_000,
            key.encode(),
            b"Bearer " + key.encode() + b" " + key.encode(),
            _header_value(rng, max_len=200),
        )
    )
    headers = [] if value is None else [(b"authorization", value)]
    method, path = rng.choice(
        (
            ("POST", CHAT),
            ("GET", "/v1/models"),
            ("GET", f"/v1/jobs/{_random_id(rng)}"),
            ("POST", f"/v1/jobs/{_random_id(rng)}/cancel"),
            ("GET", "/v1"),
        )
    )
    body = _json_bytes(_gateway_body(rng)) if method == "POST" else b""
    headers.append((b"content-type", b"application/json"))
    return HttpCase("bad_auth", method, path, tuple(headers), body, authenticated=False)


def _job_paths(rng: random.Random, inputs: _Inputs) -> HttpCase:
    candidates = [
        *inputs.other_job_ids,
        *inputs.own_job_ids,
        _random_id(rng),
        "%00",
        "%ff%fe",
        "%c3%28",
        "..",
        "%2e%2e",
        "a" * 33,
        "a" * 5000,
        "x%20y",
        "warm-up-probe",
        "1",
        "-1",
        "%2F",
        "null",
        "%F0%9F%99%82",
        "%ED%A0%80",  # an encoded lone surrogate
    ]
    job = rng.choice(candidates)
    suffix = rng.choice(("", "", "/cancel", "/cancel", "/", "/cancel/", "/x", "?x=1", "%23f"))
    method = rng.choice(("GET", "GET", "POST", "POST", "DELETE", "PUT", "PATCH", "HEAD"))
    headers = (_auth(rng, inputs),)
    body = rng.choice((b"", b"{}", b"garbage"))
    return HttpCase("job_paths", method, f"/v1/jobs/{job}{suffix}", headers, body)


def _unknown_paths_and_methods(rng: random.Random, inputs: _Inputs) -> HttpCase:
    method = rng.choice(
        ("GET", "POST", "PUT", "DELETE", "PATCH", "OPTIONS", "HEAD", "TRACE", "FOO", "PROPFIND")
    )
    path = rng.choice(
        (
            "/",
            "/v1",
            "/v1/",
            "/v2/chat/completions",
            "/v1/chat/completions/",
            "/v1/chat/completions/x",
            "/v1/completions",
            "/v1/embeddings",
            "//v1/models",
            "/v1/./models",
            "/v1/models/../jobs",
            "/v1/models/small",
            "/V1/MODELS",
            "/healthz",
            "/readyz",
            "/metrics",
            "/docs",
            "/openapi.json",
            "/redoc",
            "/%00",
            "/v1/%ff",
            "/" + "a" * 8000,
            "/v1/models?" + "q=" * 2000,
            "/v1/models?%ff=%00",
        )
    )
    headers: list[tuple[bytes, bytes]] = [_auth(rng, inputs)] if rng.random() < 0.8 else []
    body = rng.choice((b"", b"{}", _json_bytes(_gateway_body(rng))))
    if method in ("GET", "HEAD", "DELETE", "OPTIONS", "TRACE") and rng.random() < 0.7:
        body = b""
    keyed = path == "/v1" or path.startswith("/v1/") or path == "/metrics"
    authenticated = bool(headers) or not keyed
    return HttpCase("unknown_route", method, path, tuple(headers), body, authenticated)


CaseKind = Callable[[random.Random, _Inputs], HttpCase]
CASE_KINDS: tuple[tuple[CaseKind, int], ...] = (
    (_mutated_body, 6),
    (_openai_fields, 4),
    (_malformed_json, 2),
    (_not_utf8, 2),
    (_huge, 1),
    (_deeply_nested, 1),
    (_odd_headers, 2),
    (_odd_last_event_id, 3),
    (_odd_priority_or_idempotency, 3),
    (_job_paths, 3),
    (_unknown_paths_and_methods, 2),
    (_bad_auth, 1),
)


# Sending -------------------------------------------------------------------------


def fuzz_gateway(
    base_url: str,
    *,
    api_keys: Sequence[str],
    other_job_ids: Sequence[str] = (),
    own_job_ids: Sequence[str] = (),
    cases: int = 1_000,
    seed: int = 0,
    timeout_s: float = 5.0,
    stream_read_s: float = 0.3,
) -> HttpFuzzReport:
    """Send ``cases`` hostile requests to the gateway at ``base_url``; count bad answers.

    The gateway needs no worker: an interactive request is then refused with 503, a
    batch one is queued (and streamed, so it answers at once). ``api_keys`` should have
    a generous rate limit (the cases are spread over them); ``own_job_ids`` belong to
    ``api_keys[0]``. A streamed answer is read for at most ``stream_read_s``: what
    comes in that time is checked for server errors. Cases with bad credentials are
    sent last, since they get the client's address refused for a while (run
    :func:`cross_key_probe` first, or from another address). Raises nothing for what
    the gateway does; ``httpx`` errors that are the client's own fault propagate.
    """
    report = HttpFuzzReport()
    plan = http_cases(
        cases,
        seed,
        api_keys=api_keys,
        other_job_ids=other_job_ids,
        own_job_ids=own_job_ids,
    )
    timeout = httpx.Timeout(timeout_s)
    with httpx.Client(base_url=base_url, timeout=timeout) as http:
        for index, case in enumerate(plan):
            report.http_fuzz_cases += 1
            _send(http, case, index, report, stream_read_s=stream_read_s)
    return report


def _send(
    http: httpx.Client, case: HttpCase, index: int, report: HttpFuzzReport, *, stream_read_s: float
) -> None:
    where = f"case {index} {case.describe()}"
    try:
        response = _send_once(http, case, stream_read_s=stream_read_s)
    except httpx.TimeoutException:
        report.timeouts += 1
        return
    except httpx.TransportError:
        # A kept-alive connection the server had just closed (it may, after an early
        # 413, say) fails without the server having done wrong: retry on a new one.
        with httpx.Client(base_url=http.base_url, timeout=http.timeout) as fresh:
            try:
                response = _send_once(fresh, case, stream_read_s=stream_read_s)
                _check_response(response, where, report, stream_read_s=stream_read_s)
            except httpx.TimeoutException:
                report.timeouts += 1
            except httpx.TransportError as exc:
                report.transport_errors += 1
                report.fail(f"{where}: no answer: {type(exc).__name__}: {exc}"[:1000])
        return
    _check_response(response, where, report, stream_read_s=stream_read_s)


def _send_once(http: httpx.Client, case: HttpCase, *, stream_read_s: float) -> httpx.Response:
    url = http.base_url.copy_with(raw_path=case.path.encode("latin-1"))
    # A header value may not start or end with blanks: the client itself refuses them.
    headers = [(name, value.strip(b" \t")) for name, value in case.headers]
    timeout = http.timeout
    if case.streamed:
        timeout = httpx.Timeout(timeout.connect, read=stream_read_s, write=timeout.write)
    request = http.build_request(
        case.method, url, headers=headers, content=case.body, timeout=timeout
    )
    return http.send(request, stream=True)


def _check_response(
    response: httpx.Response, where: str, report: HttpFuzzReport, *, stream_read_s: float
) -> None:
    try:
        status = response.status_code
        report.statuses[status] = report.statuses.get(status, 0) + 1
        if response.headers.get("content-type", "").startswith("text/event-stream"):
            _check_stream(response, where, report, stream_read_s=stream_read_s)
            return
        body = response.read()
        code = _error_code(body) or "?"
        if status == 503:
            report.http_503 += 1
            report.http_503_codes[code] = report.http_503_codes.get(code, 0) + 1
        elif status >= 500 and code in JOB_ERROR_CODES:
            report.job_failed += 1
        elif status >= 500:
            report.http_5xx += 1
            report.fail(f"{where}: HTTP {status}: {body[:300]!r}")
    except httpx.TimeoutException:
        report.timeouts += 1
    except httpx.TransportError as exc:
        report.transport_errors += 1
        report.fail(f"{where}: answer cut off: {type(exc).__name__}: {exc}"[:1000])
    finally:
        response.close()


def _check_stream(
    response: httpx.Response, where: str, report: HttpFuzzReport, *, stream_read_s: float
) -> None:
    """Read SSE events for a while; an error event the server made up is a 5xx."""
    deadline = time.monotonic() + stream_read_s
    buffered = b""
    try:
        for chunk in response.iter_raw():
            buffered += chunk
            if time.monotonic() > deadline or len(buffered) > 1_000_000:
                break
    except httpx.ReadTimeout:
        pass  # a queued job with no worker: nothing to stream yet
    for line in buffered.split(b"\n"):
        if not line.startswith(b"data: {"):
            continue
        try:
            error = json.loads(line[6:]).get("error")
        except ValueError:
            report.http_5xx += 1
            report.fail(f"{where}: unparsable SSE data {line[:200]!r}")
            continue
        if isinstance(error, dict) and error.get("type") not in (None, "invalid_request_error"):
            if error.get("code") in JOB_ERROR_CODES:
                report.job_failed += 1
                continue
            if error.get("type") == "service_unavailable":
                report.http_503 += 1
                code = str(error.get("code"))
                report.http_503_codes[code] = report.http_503_codes.get(code, 0) + 1
                continue
            report.http_5xx += 1
            report.fail(f"{where}: error event in stream: {error}")


def _error_code(body: bytes) -> str | None:
    try:
        error = json.loads(body)["error"]
        return str(error.get("code"))
    except (ValueError, KeyError, TypeError, AttributeError):
        return None


# Client.submit -------------------------------------------------------------------

ODD_TIERS: tuple[object, ...] = ("auto", "small", "medium", "large", "SMALL", "", "xl", None, 1)
ODD_PRIORITIES: tuple[object, ...] = (
    "batch",
    "batch",
    "batch",
    "interactive",
    "BATCH",
    "",
    None,
    0,
)
ODD_IDEMPOTENCY_KEYS: tuple[object, ...] = (
    None,
    None,
    "k",
    "order-1",
    "",
    " ",
    "\x00",
    "\ud800",
    "a" * 200,
    "a" * 201,
    "🙂" * 50,
    1,
)
ODD_OWNERS: tuple[object, ...] = (None, "fuzz", "fuzz", "", "o" * 32, "o" * 33, "\x00", "\ud800", 7)
ODD_DEADLINES: tuple[object, ...] = (
    None,
    None,
    30.0,
    0,
    -1,
    1e-9,
    float("nan"),
    float("inf"),
    10**9,
    True,
    "30",
)


ODD_OPTIONS: tuple[tuple[str, tuple[object, ...]], ...] = (
    ("tier", ODD_TIERS),
    ("priority", ODD_PRIORITIES),
    ("idempotency_key", ODD_IDEMPOTENCY_KEYS),
    ("owner", ODD_OWNERS),
    ("deadline_s", ODD_DEADLINES),
)


def submit_cases(n: int, seed: int) -> list[tuple[object, dict[str, object]]]:
    """``n`` (request, enqueue options) pairs for ``Client.submit``, drawn from ``seed``."""
    rng = random.Random(f"{seed}:submit")
    cases = []
    for _ in range(n):
        request: object
        choice = rng.random()
        if choice < 0.45:
            request = random_bad_request(rng)
        elif choice < 0.6:
            request = random_text(rng, max_chars=rng.choice((20, 2000)))
        elif choice < 0.8:
            request = _odd_text_fields(rng)
        elif choice < 0.9:
            payload = valid_request()
            payload["system_prompt"] = rng.choice(
                ("support", "support@1", "support@0", "support@99", "nope", "support@1@1")
            )
            payload["max_tokens"] = rng.choice((1, 256, 2048, 32_768))
            request = payload
        else:
            payload = valid_request()
            payload["messages"] = [
                {"role": "user", "content": "word " * rng.choice((10, 5_000, 39_000))}
            ]
            request = payload
        # Mostly sound options, so the request itself goes all the way to the
        # database; now and then one odd option, so each option's check is reached.
        options: dict[str, object] = {
            "tier": rng.choice(("auto", "auto", "small", "medium", "large")),
            "priority": "batch",
            "idempotency_key": rng.choice((None, None, f"fuzz-{rng.randrange(20)}")),
            "owner": rng.choice((None, "fuzz", "fuzz-b")),
            "deadline_s": rng.choice((None, None, 30.0)),
        }
        if rng.random() < 0.4:
            name, values = rng.choice(ODD_OPTIONS)
            options[name] = rng.choice(values)
        cases.append((request, options))
    return cases


def _odd_text_fields(rng: random.Random) -> dict[str, Any]:
    """A valid request but for one odd string (NUL, a lone surrogate...) in a text field."""
    payload = valid_request()
    odd = rng.choice((*ODD_STRINGS, "a\x00b", "hi \udcff", "\ud83d", "\ufeff", "\U0010ffff"))
    where = rng.choice(
        ("content", "stop", "metadata", "metadata key", "conversation_id", "numbers")
    )
    if where == "numbers":
        # Numbers the request model takes but JSON, the database or an engine may not.
        payload["metadata"] = {"n": rng.choice(ODD_NUMBERS)}
        payload["seed"] = rng.choice((*ODD_NUMBERS, 2**64, -(2**63) - 1, 2**64 - 1))
        return payload
    if where == "content":
        payload["messages"] = [{"role": "user", "content": "hi " + odd}]
    elif where == "stop":
        payload["stop"] = [odd]
    elif where == "metadata":
        payload["metadata"] = {"k": odd}
    elif where == "metadata key":
        payload["metadata"] = {odd: "v"}
    else:
        payload["conversation_id"] = odd
    return payload


def fuzz_submit(client: Client, *, cases: int = 1_000, seed: int = 0) -> SubmitFuzzReport:
    """``Client.submit`` over ``cases`` bad inputs; count what escapes as a non-llmq error.

    Priorities are mostly batch (and interactive only with ``require_warm_worker``, so
    nothing waits for a worker that may not exist); every job that is accepted is
    cancelled at once, so none of them runs. A crash in that cancel counts too.
    """
    report = SubmitFuzzReport()
    refused: Counter[str] = Counter()
    for index, (request, options) in enumerate(submit_cases(cases, seed)):
        report.submit_fuzz_cases += 1
        try:
            handle = client.submit(
                cast(RequestLike, request),
                tier=cast(str, options["tier"]),
                priority=cast(str, options["priority"]),
                idempotency_key=cast("str | None", options["idempotency_key"]),
                owner=cast("str | None", options["owner"]),
                require_warm_worker=options["priority"] == "interactive",
                deadline_s=cast("float | None", options["deadline_s"]),
            )
            report.accepted += 1
            handle.cancel()
        except (BrokerUnavailable, DatabaseUnavailable) as exc:
            # Redis and the database are up while fuzzing: bad input reached them.
            refused[type(exc).__name__] += 1
            report.submit_unavailable += 1
            _describe_case(report, index, request, options, exc)
        except LlmqError as exc:
            refused[type(exc).__name__] += 1
            if not str(exc).strip():
                _submit_crash(report, index, request, options, exc)
        except Exception as exc:  # noqa: BLE001 - any other exception is the crash counted
            _submit_crash(report, index, request, options, exc)
    report.refused = dict(refused)
    return report


def _submit_crash(
    report: SubmitFuzzReport,
    index: int,
    request: object,
    options: dict[str, object],
    exc: BaseException,
) -> None:
    report.submit_crashes += 1
    _describe_case(report, index, request, options, exc)


def _describe_case(
    report: SubmitFuzzReport,
    index: int,
    request: object,
    options: dict[str, object],
    exc: BaseException,
) -> None:
    if len(report.failures) < MAX_FAILURES_KEPT:
        report.failures.append(
            f"case {index}: {type(exc).__name__}: {str(exc)[:200]}"
            f" request={repr(request)[:200]} options={options!r:.300}"
        )


# Cross-key access ----------------------------------------------------------------


def cross_key_probe(
    base_url: str,
    key_a: str,
    key_b: str,
    *,
    client: Client,
    timeout_s: float = 5.0,
    stream_read_s: float = 1.0,
) -> CrossKeyReport:
    """Key B tries to read, resume, cancel and idempotency-collide with key A's jobs.

    Key A gets three batch jobs, each with its own ``Idempotency-Key``: one queued
    through the gateway (a streamed request, since no worker answers), and two
    submitted through ``client`` as key A's (``owner``), one of them cancelled so that
    its stream replays at once. For each, key B asks for its status (and variants of
    its id), resumes its stream with ``Last-Event-ID`` (streamed or not), cancels it,
    and sends A's request (first two) or another request (third) with A's
    ``Idempotency-Key``. An attempt succeeded if B got a 2xx, or no answer in time
    (it got past the owner check), for A's job; saw A's job id in an answer; changed
    A's job; got A's job for A's key instead of one of its own; or was told (409)
    that A used the key. Raises ``ValueError`` if a key is not valid and
    ``RuntimeError`` if key A cannot submit. Every job made here is cancelled before
    returning; needs no worker (and none should be serving the ``small`` tier).
    """
    report = CrossKeyReport()
    identity_a = authenticate(client.sessions, key_a)
    identity_b = authenticate(client.sessions, key_b)
    if identity_a is None or identity_b is None:
        raise ValueError("both keys must be valid API keys")
    tag = uuid.uuid4().hex[:12]
    body: dict[str, Any] = {
        "model": "small",
        "messages": [{"role": "user", "content": f"cross-key probe {tag}"}],
        "priority": "batch",
        "stream": True,
    }
    made: list[str] = []
    timeout = httpx.Timeout(timeout_s, read=stream_read_s)
    # Redirects are followed: a 307 to another path is not an answer about A's job.
    with httpx.Client(base_url=base_url, timeout=timeout, follow_redirects=True) as http:
        queued_key = f"probe-queued-{tag}"
        status, _ids = _post_stream(http, key_a, body, {"Idempotency-Key": queued_key})
        if status != 200:
            raise RuntimeError(f"key A could not submit through the gateway: HTTP {status}")
        queued = _job_by_key(client, identity_a.id, queued_key)
        if queued is None:
            raise RuntimeError("key A's job is not in the job table")
        made.append(queued)
        done_key, other_key = f"probe-done-{tag}", f"probe-other-{tag}"
        text = body["messages"][0]["content"]
        done = client.submit(
            text, tier="small", priority="batch", idempotency_key=done_key, owner=identity_a.id
        ).job_id
        made.append(done)
        client.cancel(done)
        other = client.submit(
            text, tier="small", priority="batch", idempotency_key=other_key, owner=identity_a.id
        ).job_id
        made.append(other)
        probes = ((queued, queued_key, True), (done, done_key, True), (other, other_key, False))
        try:
            for job_id, idem_key, same_body in probes:
                _probe_job(
                    http,
                    client,
                    report,
                    job_id=job_id,
                    idem_key=idem_key,
                    same_body=same_body,
                    body=body,
                    key_b=key_b,
                    owner_b=identity_b.id,
                )
                made.extend(_jobs_of(client, identity_b.id))
        finally:
            for job_id in set(made):
                with contextlib.suppress(LlmqError):
                    client.cancel(job_id)
    return report


def _probe_job(
    http: httpx.Client,
    client: Client,
    report: CrossKeyReport,
    *,
    job_id: str,
    idem_key: str,
    same_body: bool,
    body: dict[str, Any],
    key_b: str,
    owner_b: str,
) -> None:
    b = {"Authorization": f"Bearer {key_b}"}
    before = client.status(job_id)
    for variant in (job_id, job_id.upper(), f"{job_id}/", f"{job_id}%20", f"{job_id}?x=1"):
        url = http.base_url.copy_with(raw_path=f"/v1/jobs/{variant}".encode())
        response = http.get(url, headers=b)
        report.attempt(
            _saw(response, job_id), f"GET /v1/jobs/{variant}: HTTP {response.status_code}"
        )
    response = http.post(f"/v1/jobs/{job_id}/cancel", headers=b)
    touched = _saw(response, job_id) or client.status(job_id) != before
    report.attempt(touched, f"cancel: HTTP {response.status_code}, status {client.status(job_id)}")
    for seq in ("0", "1", "5"):
        for stream in (True, False):
            status, ids = _post_stream(
                http, key_b, {**body, "stream": stream}, {"Last-Event-ID": f"{job_id}.{seq}"}
            )
            seen = status < 400 or any(i.startswith(job_id) for i in ids)
            report.attempt(seen, f"resume {job_id}.{seq} (stream={stream}): HTTP {status} {ids}")
    if same_body:
        # The same request with A's idempotency key must make B a job of its own.
        status, ids = _post_stream(http, key_b, body, {"Idempotency-Key": idem_key})
        mine = _job_by_key(client, owner_b, idem_key)
        collided = (
            status == 409
            or any(i.startswith(job_id) for i in ids)
            or (status == 200 and (mine is None or mine == job_id))
        )
        report.attempt(collided, f"idempotency collide: HTTP {status}, B's job {mine}, {ids}")
    else:
        # Another request with A's key: a 409 would tell B that A used the key.
        changed = {**body, "messages": [{"role": "user", "content": f"other {uuid.uuid4().hex}"}]}
        status, ids = _post_stream(http, key_b, changed, {"Idempotency-Key": idem_key})
        leaked = status == 409 or any(i.startswith(job_id) for i in ids)
        report.attempt(leaked, f"idempotency key of A, another body: HTTP {status}, {ids}")
    after = client.status(job_id)
    report.attempt(after != before, f"A's job changed from {before} to {after}")


def _saw(response: httpx.Response, job_id: str) -> bool:
    if response.status_code < 400:
        return True
    # A refusal may name the id B sent; it must say nothing else about A's job.
    return any(word in response.text for word in ('"status"', '"routing"', '"tier"'))


def _post_stream(
    http: httpx.Client, key: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, list[str]]:
    """POST a chat request; its status and the SSE event ids read within the read timeout.

    The status is 0 when no answer came in time: an unstreamed request that got past
    every check and now waits for its job (a refusal comes at once).
    """
    ids: list[str] = []
    all_headers = {"Authorization": f"Bearer {key}", **headers}
    try:
        with http.stream("POST", CHAT, json=body, headers=all_headers) as response:
            try:
                for line in response.iter_lines():
                    if line.startswith("id: "):
                        ids.append(line[4:])
                    elif "job_id" in line or "chatcmpl-" in line:
                        ids.append(line[:200])
            except httpx.ReadTimeout:
                pass  # queued with no worker: nothing streams yet
            return response.status_code, ids
    except httpx.ReadTimeout:
        return 0, ids


def _job_by_key(client: Client, owner: str, idempotency_key: str) -> str | None:
    with client.sessions() as session:
        return session.scalars(
            select(Job.id).where(Job.owner == owner, Job.idempotency_key == idempotency_key)
        ).one_or_none()


def _jobs_of(client: Client, owner: str) -> list[str]:
    with client.sessions() as session:
        rows = session.scalars(
            select(Job.id).where(Job.owner == owner, Job.status == JobStatus.QUEUED.value)
        )
        return list(rows)
