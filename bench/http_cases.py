"""Hostile raw requests for the gateway, drawn from a seed: bodies, headers, paths,
methods, ``Last-Event-ID`` and other keys' job ids.

Every case is drawn from a seeded ``random.Random``: the same seed and inputs give the
same requests, so a failure found once can be replayed. :mod:`bench.http_fuzz` sends
them.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, cast

from bench.fuzz import HUGE_TEXT_CHARS, random_bad_request, valid_request
from bench.fuzz_values import ODD_NUMBERS, ODD_STRINGS, random_json_value, random_text

CHAT = "/v1/chat/completions"

# Bytes a header value may hold (RFC 9110 field-vchar and inner spaces); bytes above
# 0x7f are legal and are how a client sends text that is not UTF-8.
_VCHAR = bytes(range(0x21, 0x7F)) + bytes(range(0x80, 0x100))
# Digits Python's str.isdigit() accepts that int() refuses, and other lookalikes a
# latin-1 header can carry.
ODD_DIGITS = ("\u00b2", "\u00b3", "\u00b9", "\u00bc", "\u00bd", "\uff11", "\u0663")


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
