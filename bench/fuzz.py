"""Bad inputs for fuzzing: malformed requests and malformed queue entries.

llmq promises two things about garbage: a caller who sends a bad request gets an
``LlmqError`` that names the problem (never a traceback), and a worker survives any
bytes pushed onto its Redis list (a queue is a plain list anything can write to).

The cases come in two forms built from the same generators. Plain functions of a
seeded ``random.Random`` draw the same cases on every run, so a benchmark can count
crashes over thousands of inputs without a test framework. Hypothesis strategies
wrap those functions (plus hypothesis's own arbitrary values) so tests get shrinking
to a minimal failing input. hypothesis is imported only inside the strategies: the
benchmark runs where only the worker's dependencies are installed.
"""

from __future__ import annotations

import base64
import json
import math
import random
import string
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, TypeAlias, cast

import redis
from pydantic import ValidationError

from producer.gateway.openai_models import ChatCompletionRequest
from producer.submission import RequestLike, parse_request
from schemas.errors import LlmqError
from schemas.queues import GENERATE_TASK, Priority, Tier, queue_name

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

JsonValue: TypeAlias = bool | int | float | str | list["JsonValue"] | dict[str, "JsonValue"] | None

VALID_REQUEST: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
"""The smallest request llmq serves; every request mutation starts from a copy of it."""

REQUEST_FIELDS = (
    "messages",
    "system_prompt",
    "max_tokens",
    "temperature",
    "top_p",
    "stop",
    "seed",
    "conversation_id",
    "metadata",
)
NUMERIC_FIELDS = ("max_tokens", "temperature", "top_p", "seed")

# Values at and past every edge a numeric field has: signs, ceilings, 64-bit limits,
# bools (an int subclass), and the floats JSON parsers let through.
ODD_NUMBERS: tuple[int | float, ...] = (
    0,
    -1,
    1,
    32_768,
    32_769,
    2**63,
    -(2**63) - 1,
    10**40,
    0.5,
    -0.0,
    1e-320,
    1e308,
    math.nan,
    math.inf,
    -math.inf,
    True,
    False,
)
ODD_STRINGS: tuple[str, ...] = (
    "",
    " ",
    "\n\t ",
    "\x00",
    "\ud800",  # a lone surrogate: json.loads produces one from "\\ud800"
    "\u200b",
    "null",
    "8",
    "USER",
    "user ",
    "🙂🙂🙂",
    "support@",
    "../etc/passwd",
)
HUGE_TEXT_CHARS = 200_001  # one past the longest message content a request may carry
MAX_MESSAGES = 512

EMPTY_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
DEFAULT_QUEUE = queue_name(Tier.SMALL, Priority.INTERACTIVE)


# Arbitrary JSON-like values ------------------------------------------------------


def random_json_value(rng: random.Random, *, depth: int = 3) -> JsonValue:
    """Any value ``json.loads`` can return (NaN and infinities included), nested ``depth``."""
    scalars: tuple[Callable[[], JsonValue], ...] = (
        lambda: None,
        lambda: rng.random() < 0.5,
        lambda: rng.choice((rng.randint(-(2**70), 2**70), *ODD_NUMBERS)),
        lambda: rng.choice((rng.uniform(-1e6, 1e6), math.nan, math.inf, -math.inf)),
        lambda: random_text(rng),
    )
    containers: tuple[Callable[[], JsonValue], ...] = (
        lambda: [random_json_value(rng, depth=depth - 1) for _ in range(rng.randrange(4))],
        lambda: {
            random_text(rng, max_chars=8): random_json_value(rng, depth=depth - 1)
            for _ in range(rng.randrange(4))
        },
    )
    return rng.choice(scalars + containers if depth > 0 else scalars)()


def random_text(rng: random.Random, *, max_chars: int = 24) -> str:
    """Short text, often from the odd strings, otherwise any printable or unicode mix."""
    if rng.random() < 0.3:
        return rng.choice(ODD_STRINGS)
    alphabet = string.printable + "éß漢字🙂\u0301\x00\x7f"
    return "".join(rng.choice(alphabet) for _ in range(rng.randrange(max_chars + 1)))


# Bad request payloads ------------------------------------------------------------

Mutation = Callable[[random.Random, dict[str, Any]], object]


def valid_request() -> dict[str, Any]:
    """A fresh copy of :data:`VALID_REQUEST` that a mutation may change in place."""
    return json.loads(json.dumps(VALID_REQUEST))  # type: ignore[no-any-return]


def random_bad_request(rng: random.Random) -> object:
    """A mutation of a valid request (one to three changes), or now and then any value."""
    if rng.random() < 0.1:
        return random_json_value(rng)
    payload: object = valid_request()
    for _ in range(rng.randint(1, 3)):
        if not isinstance(payload, dict):
            break
        payload = rng.choice(REQUEST_MUTATIONS)(rng, payload)
    return payload


def _drop_something(rng: random.Random, request: dict[str, Any]) -> object:
    messages = request.get("messages")
    first = messages[0] if isinstance(messages, list) and messages else None
    if isinstance(first, dict) and rng.random() < 0.5:
        first.pop(rng.choice(("role", "content")), None)
        return request
    if request:
        request.pop(rng.choice(list(request)))
    return request


def _field_of_wrong_type(rng: random.Random, request: dict[str, Any]) -> object:
    request[rng.choice(REQUEST_FIELDS)] = random_json_value(rng, depth=2)
    return request


def _odd_number(rng: random.Random, request: dict[str, Any]) -> object:
    request[rng.choice(NUMERIC_FIELDS)] = rng.choice(ODD_NUMBERS)
    return request


def _number_as_text(rng: random.Random, request: dict[str, Any]) -> object:
    request[rng.choice(NUMERIC_FIELDS)] = rng.choice(("8", "0.5", "NaN", "inf", "1e999", ""))
    return request


def _unknown_role(rng: random.Random, request: dict[str, Any]) -> object:
    role: object = rng.choice(("robot", "tool", "function", "developer", None, 1, ["user"]))
    request["messages"] = [{"role": rng.choice((role, random_text(rng))), "content": "hi"}]
    return request


def _bad_content(rng: random.Random, request: dict[str, Any]) -> object:
    content: object = rng.choice(
        (
            rng.choice(ODD_STRINGS),
            "x" * HUGE_TEXT_CHARS,
            random_json_value(rng, depth=1),
            [{"type": "text", "text": "hi"}],
        )
    )
    request["messages"] = [{"role": "user", "content": content}]
    return request


def _openai_content_parts(rng: random.Random, request: dict[str, Any]) -> object:
    # The gateway joins OpenAI content parts into text; any part can be malformed.
    parts = [
        rng.choice(
            (
                {"type": "text", "text": random_json_value(rng, depth=1)},
                {"type": "image_url", "image_url": {"url": "http://x"}},
                random_json_value(rng, depth=1),
            )
        )
        for _ in range(rng.randint(1, 3))
    ]
    request["messages"] = [{"role": "user", "content": parts}]
    return request


def _bad_message_list(rng: random.Random, request: dict[str, Any]) -> object:
    request["messages"] = rng.choice(
        (
            [],
            [None],
            ["hi"],
            [[]],
            {"role": "user", "content": "hi"},
            [{"role": "assistant", "content": "hi"}],
            [{"role": "system", "content": "be brief"}],
            [{"role": "user", "content": "hi"}] * (MAX_MESSAGES + 1),
            [{"role": "user", "content": "hi", "name": "bob"}],
        )
    )
    return request


def _extra_field(rng: random.Random, request: dict[str, Any]) -> object:
    name = rng.choice(("tier", "priority", "model", "stream", "n", "", "\x00", random_text(rng)))
    request[name] = random_json_value(rng, depth=1)
    return request


def _odd_optional_text(rng: random.Random, request: dict[str, Any]) -> object:
    field = rng.choice(("system_prompt", "conversation_id"))
    request[field] = rng.choice((*ODD_STRINGS, "Bad Name!", "a" * 201, "x@1@2", "support@01"))
    return request


def _bad_stop_or_metadata(rng: random.Random, request: dict[str, Any]) -> object:
    if rng.random() < 0.5:
        request["stop"] = rng.choice(("\n", [""], ["a"] * 9, [1, None], [["x"]]))
    else:
        request["metadata"] = rng.choice(
            ({"k": [1]}, {"k": {"n": 1}}, {str(i): i for i in range(65)}, [], "tag", {"": None})
        )
    return request


def _deeply_nested(rng: random.Random, request: dict[str, Any]) -> object:
    value: object = "hi"
    for _ in range(rng.choice((50, 500))):
        value = [value] if rng.random() < 0.5 else {"k": value}
    request[rng.choice(REQUEST_FIELDS)] = value
    return request


def _not_a_dict(rng: random.Random, request: dict[str, Any]) -> object:
    return rng.choice(
        (
            None,
            [request],
            json.dumps(request).encode(),
            rng.choice(ODD_STRINGS),
            "x" * HUGE_TEXT_CHARS,
            tuple(request.items()),
            random_json_value(rng, depth=1),
        )
    )


REQUEST_MUTATIONS: tuple[Mutation, ...] = (
    _drop_something,
    _field_of_wrong_type,
    _odd_number,
    _number_as_text,
    _unknown_role,
    _bad_content,
    _openai_content_parts,
    _bad_message_list,
    _extra_field,
    _odd_optional_text,
    _bad_stop_or_metadata,
    _deeply_nested,
    _not_a_dict,
)


# Checking a request --------------------------------------------------------------


def check_request(payload: object) -> str | None:
    """Return None if llmq accepted ``payload`` or refused it with a clear error.

    Otherwise return a one-line description of the exception that escaped: that is a
    crash, since a caller would see a traceback (the client) or a 500 (the gateway).
    Both entry points are tried: the client's parse, and the gateway's body model
    followed by its translation into an llmq request.
    """
    crash = _crash_in_client(payload)
    if crash is None:
        crash = _crash_in_gateway(payload)
    return crash


def _crash_in_client(payload: object) -> str | None:
    try:
        parse_request(cast(RequestLike, payload))
    except LlmqError as exc:
        return None if str(exc).strip() else f"client: {type(exc).__name__} without a message"
    except Exception as exc:  # noqa: BLE001 - any other exception is the crash being counted
        return f"client: {_describe(exc)}"
    return None


def _crash_in_gateway(payload: object) -> str | None:
    try:
        body = ChatCompletionRequest.model_validate(_as_gateway_body(payload))
    except ValidationError:
        # The gateway answers these with a 400 that lists each problem.
        return None
    try:
        parse_request(body.to_llmq())
    except LlmqError as exc:
        return None if str(exc).strip() else f"gateway: {type(exc).__name__} without a message"
    except Exception as exc:  # noqa: BLE001 - any other exception is the crash being counted
        return f"gateway: {_describe(exc)}"
    return None


def _as_gateway_body(payload: object) -> object:
    # Without a model name every body stops at the first check; name one to go deeper.
    if isinstance(payload, dict) and "model" not in payload:
        return {"model": "auto", **payload}
    return payload


def _describe(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"[:300]


def find_request_crashes(payloads: Iterable[object]) -> list[str]:
    """``check_request`` over every payload; one line per crash, naming the case's index."""
    crashes = []
    for index, payload in enumerate(payloads):
        crash = check_request(payload)
        if crash is not None:
            crashes.append(f"case {index}: {crash}")
    return crashes


# Bad raw queue payloads ----------------------------------------------------------


def task_message(
    args: object,
    *,
    message_id: str,
    kwargs: object = None,
    embed: object = None,
    task: object = GENERATE_TASK,
    queue: str = DEFAULT_QUEUE,
) -> dict[str, Any]:
    """A kombu envelope of a Celery protocol-2 message, as kombu stores it on a Redis list.

    With ``args=[job_id]`` and the defaults it is exactly what the producer publishes,
    so a mutation of one part gets past every other check and reaches that part's.
    ``message_id`` is the task id and delivery tag: each message needs its own, as the
    worker tracks unacknowledged messages by tag.
    """
    body = [args, {} if kwargs is None else kwargs, EMPTY_EMBED if embed is None else embed]
    return {
        "body": _base64_json(body),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": task,
            "id": message_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": message_id,
            "parent_id": None,
            "argsrepr": repr(args)[:100],
            "kwargsrepr": "{}",
            "origin": "fuzz",
            "ignore_result": True,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
        },
        "properties": {
            "correlation_id": message_id,
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": message_id,
        },
    }


def _base64_json(value: object) -> str:
    return _base64(json.dumps(value).encode())


def _base64(raw: bytes) -> str:
    return base64.b64encode(raw).decode()


def random_queue_payload(rng: random.Random) -> bytes:
    """One raw list entry: random bytes, non-JSON text, JSON that is not a message, or a
    task message with one part broken."""
    return rng.choice(QUEUE_PAYLOAD_KINDS)(rng)


def _random_bytes(rng: random.Random) -> bytes:
    return rng.randbytes(rng.randrange(257))


def _not_json_text(rng: random.Random) -> bytes:
    valid = json.dumps(_well_formed_message(rng))
    text = rng.choice(
        (
            valid[: rng.randrange(len(valid))],  # a message cut short
            valid.replace('"', "'"),
            "[" * rng.randrange(1, 100_000),  # nesting past the JSON decoder's recursion limit
            random_text(rng, max_chars=200),
            "\ud800",
        )
    )
    return text.encode("utf-8", errors="surrogatepass")


def _json_not_a_message(rng: random.Random) -> bytes:
    value = rng.choice(
        (
            random_json_value(rng),
            {"properties": random_json_value(rng, depth=1)},
            {"body": "e30=", "headers": {"task": GENERATE_TASK}},
            {"properties": {"delivery_tag": "t"}, "body": random_json_value(rng, depth=1)},
        )
    )
    return json.dumps(value).encode()


def _broken_task_message(rng: random.Random) -> bytes:
    message = rng.choice(TASK_MESSAGE_BREAKAGES)(rng)
    return json.dumps(message).encode()


def _unknown_job_id(rng: random.Random) -> str:
    return rng.randbytes(16).hex()


def _job_id_of_wrong_type(rng: random.Random) -> dict[str, Any]:
    job_id = rng.choice(
        (
            None,
            0,
            -1,
            2**70,
            1.5,
            True,
            [],
            {},
            [_unknown_job_id(rng)],
            "",
            " ",
            "\x00",
            "x" * 10_000,
            random_text(rng),
            random_json_value(rng, depth=1),
        )
    )
    return task_message([job_id], message_id=_unknown_job_id(rng))


def _well_formed_message(rng: random.Random) -> dict[str, Any]:
    # What the producer would send for a job that does not exist.
    job_id = _unknown_job_id(rng)
    return task_message([job_id], message_id=job_id)


def _args_of_wrong_shape(rng: random.Random) -> dict[str, Any]:
    return task_message(
        rng.choice(
            (
                [],
                _unknown_job_id(rng),  # a string where a list goes: Celery spreads its letters
                {"job_id": _unknown_job_id(rng)},
                [_unknown_job_id(rng), 1, None],
                None,
                7,
                random_json_value(rng, depth=2),
            )
        ),
        message_id=_unknown_job_id(rng),
        kwargs=rng.choice((None, {"job_id": 7}, {"unexpected": 1}, [], "kw", 3)),
        embed=rng.choice((None, [], "embed", 1, {"callbacks": "x"}, {"chain": [1]})),
    )


def _unknown_task(rng: random.Random) -> dict[str, Any]:
    task = rng.choice(("llmq.nope", "", "celery.ping", GENERATE_TASK + " ", None, 5, ["x"]))
    return task_message([_unknown_job_id(rng)], message_id=_unknown_job_id(rng), task=task)


def _body_not_base64(rng: random.Random) -> dict[str, Any]:
    message = _well_formed_message(rng)
    message["body"] = rng.choice(("!!!", "QQ", "not base64 at all", "", None, 12, ["e30="], {}))
    return message


def _body_base64_of_garbage(rng: random.Random) -> dict[str, Any]:
    message = _well_formed_message(rng)
    raw = rng.choice(
        (
            rng.randbytes(rng.randrange(64)),
            json.dumps(random_json_value(rng)).encode(),
            json.dumps({"args": [_unknown_job_id(rng)], "kwargs": 1}).encode(),
            json.dumps({"task": GENERATE_TASK, "args": [1], "id": "x"}).encode(),
            b"[1, 2",
        )
    )
    message["body"] = _base64(raw)
    return message


def _broken_header(rng: random.Random) -> dict[str, Any]:
    message = _well_formed_message(rng)
    if rng.random() < 0.2:
        message["headers"] = rng.choice((None, [], "headers", 1, {}))
        return message
    name = rng.choice(
        (
            "id",
            "eta",
            "expires",
            "retries",
            "timelimit",
            "root_id",
            "parent_id",
            "group",
            "argsrepr",
            "kwargsrepr",
            "stamps",
            "stamped_headers",
            "ignore_result",
            "replaced_task_nesting",
        )
    )
    message["headers"][name] = rng.choice(
        (
            random_json_value(rng, depth=1),
            "not a date",
            "1999-01-01T00:00:00",
            [1, 2, 3],
            -1,
            {"x": 1},
        )
    )
    return message


def _broken_properties(rng: random.Random) -> dict[str, Any]:
    message = _well_formed_message(rng)
    if rng.random() < 0.2:
        message["properties"] = rng.choice((None, [], "p", 1))
        return message
    properties = message["properties"]
    name = rng.choice(("delivery_tag", "body_encoding", "delivery_info", "priority"))
    if rng.random() < 0.3:
        properties.pop(name)
    else:
        properties[name] = rng.choice(
            (random_json_value(rng, depth=1), "rot13", "", -5, 300, {"routing_key": 1})
        )
    return message


def _broken_content_type(rng: random.Random) -> dict[str, Any]:
    message = _well_formed_message(rng)
    field = rng.choice(("content-type", "content-encoding"))
    message[field] = rng.choice(
        (
            "application/x-python-serialize",
            "application/x-yaml",
            "text/plain",
            "no-such-codec",
            "",
            None,
            7,
        )
    )
    return message


TASK_MESSAGE_BREAKAGES: tuple[Callable[[random.Random], dict[str, Any]], ...] = (
    _job_id_of_wrong_type,
    _well_formed_message,
    _args_of_wrong_shape,
    _unknown_task,
    _body_not_base64,
    _body_base64_of_garbage,
    _broken_header,
    _broken_properties,
    _broken_content_type,
)

# Broken task messages are the most numerous because they get furthest into the worker.
QUEUE_PAYLOAD_KINDS: tuple[Callable[[random.Random], bytes], ...] = (
    _random_bytes,
    _not_json_text,
    _json_not_a_message,
    _broken_task_message,
    _broken_task_message,
    _broken_task_message,
    _broken_task_message,
)


def push_raw_payloads(client: redis.Redis, queue: str, payloads: Iterable[bytes]) -> int:
    """LPUSH each payload onto ``queue``, as kombu publishes; return how many were pushed.

    One pipeline, so a thousand entries land in one round trip and the worker meets
    them back to back, as it would a burst from a misbehaving producer.
    """
    pipe = client.pipeline(transaction=False)
    count = 0
    for payload in payloads:
        pipe.lpush(queue, payload)
        count += 1
    pipe.execute()
    return count


# Deterministic case sets, for a benchmark ----------------------------------------


@dataclass(frozen=True)
class FuzzCases:
    """Bad request payloads and bad raw queue entries drawn from one seed."""

    requests: list[object]
    queue_payloads: list[bytes]


def fuzz_cases(n: int, seed: int) -> FuzzCases:
    """``n`` bad requests and ``n`` bad queue entries; the same seed gives the same cases.

    Each kind has its own generator seeded from ``seed``, so the request cases do not
    change when only the number of queue payloads does.
    """
    request_rng = random.Random(f"{seed}:requests")
    queue_rng = random.Random(f"{seed}:queue")
    return FuzzCases(
        requests=[random_bad_request(request_rng) for _ in range(n)],
        queue_payloads=[random_queue_payload(queue_rng) for _ in range(n)],
    )


# Hypothesis strategies, for tests ------------------------------------------------


def json_values() -> SearchStrategy[JsonValue]:
    """Any JSON-like value: None, bools, ints of any size, floats with NaN and
    infinities, any text, and lists and dicts of those."""
    from hypothesis import strategies as st

    scalars: SearchStrategy[JsonValue] = st.one_of(
        st.none(), st.booleans(), st.integers(), st.floats(), st.text()
    )
    return st.recursive(
        scalars,
        lambda children: st.one_of(st.lists(children), st.dictionaries(st.text(), children)),
        max_leaves=20,
    )


def bad_request_payloads() -> SearchStrategy[object]:
    """Arbitrary values and mutations of a valid request; hypothesis shrinks either."""
    from hypothesis import strategies as st

    mutations = st.randoms(use_true_random=False).map(random_bad_request)
    return st.one_of(json_values(), mutations)


def raw_queue_payloads() -> SearchStrategy[bytes]:
    """Arbitrary bytes and the broken entries of :func:`random_queue_payload`."""
    from hypothesis import strategies as st

    entries = st.randoms(use_true_random=False).map(random_queue_payload)
    return st.one_of(st.binary(max_size=512), entries)
