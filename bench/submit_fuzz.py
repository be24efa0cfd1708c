"""Fuzzing ``Client.submit``: bad requests and odd enqueue options, so routing, prompt
resolution, the length check and the database all see them; anything raised that is
not an ``LlmqError`` is a crash.

Every case is drawn from a seeded ``random.Random``: the same seed sends the same
calls, so a failure found once can be replayed.
"""

from __future__ import annotations

import random
from collections import Counter
from dataclasses import dataclass, field
from typing import Any, cast

from bench.fuzz import random_bad_request, valid_request
from bench.fuzz_values import ODD_NUMBERS, ODD_STRINGS, random_text
from bench.http_fuzz import MAX_FAILURES_KEPT
from producer.client import Client
from producer.submission import RequestLike
from schemas.errors import BrokerUnavailable, DatabaseUnavailable, LlmqError


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
                _describe_case(report, index, request, options, exc, crashed=True)
        except Exception as exc:  # noqa: BLE001 - any other exception is the crash counted
            _describe_case(report, index, request, options, exc, crashed=True)
    report.refused = dict(refused)
    return report


def _describe_case(
    report: SubmitFuzzReport,
    index: int,
    request: object,
    options: dict[str, object],
    exc: BaseException,
    *,
    crashed: bool = False,
) -> None:
    """Keep a line on the case that failed (the first ``MAX_FAILURES_KEPT``); count
    it as a crash when ``crashed``."""
    if crashed:
        report.submit_crashes += 1
    if len(report.failures) < MAX_FAILURES_KEPT:
        report.failures.append(
            f"case {index}: {type(exc).__name__}: {str(exc)[:200]}"
            f" request={repr(request)[:200]} options={options!r:.300}"
        )
