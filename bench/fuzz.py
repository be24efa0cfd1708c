"""Bad requests for fuzzing: a caller who sends a bad request gets an ``LlmqError`` that
names the problem, never a traceback.

The cases come in two forms built from the same generators. Plain functions of a
seeded ``random.Random`` draw the same cases on every run, so a benchmark can count
crashes over thousands of inputs without a test framework (:func:`fuzz_cases` draws
bad requests and, from :mod:`bench.queue_fuzz`, bad queue entries). Hypothesis
strategies wrap those functions (plus hypothesis's own arbitrary values) so tests get
shrinking to a minimal failing input. hypothesis is imported only inside the
strategies: the benchmark runs where only the worker's dependencies are installed.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, cast

from pydantic import ValidationError

from bench.fuzz_values import (
    ODD_NUMBERS,
    ODD_STRINGS,
    json_values,
    random_json_value,
    random_text,
)
from bench.queue_fuzz import random_queue_payload
from producer.gateway.protocol.chat import ChatCompletionRequest
from producer.submission import RequestLike, parse_request
from schemas.errors import LlmqError
from schemas.requests import GenerationRequest

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

VALID_REQUEST: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 8}
"""The smallest request llmq serves; every request mutation starts from a copy of it."""

REQUEST_FIELDS = tuple(GenerationRequest.from_text("hi").model_dump(mode="json"))
"""The fields a plain request carries (one without tools, sampling extras or several
choices), in the order the request model writes them; mutations pick among these."""
NUMERIC_FIELDS = ("max_tokens", "temperature", "top_p", "seed")

HUGE_TEXT_CHARS = 200_001  # one past the longest message content a request may carry
MAX_MESSAGES = 512


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


def bad_request_payloads() -> SearchStrategy[object]:
    """Arbitrary values and mutations of a valid request; hypothesis shrinks either."""
    from hypothesis import strategies as st

    mutations = st.randoms(use_true_random=False).map(random_bad_request)
    return st.one_of(json_values(), mutations)
