"""Bad raw queue entries: a worker survives any bytes pushed onto its Redis list (a
queue is a plain list anything can write to).

:func:`random_queue_payload` draws one from a seeded ``random.Random`` (the same seed
gives the same entries); :func:`raw_queue_payloads` is the hypothesis strategy for
tests, imported lazily like the others.
"""

from __future__ import annotations

import base64
import json
import random
from collections.abc import Callable, Iterable
from typing import TYPE_CHECKING, Any

import redis

from bench.fuzz_values import random_json_value, random_text
from schemas.messages import celery_job_message
from schemas.queues import GENERATE_TASK, Priority, Tier, queue_name

if TYPE_CHECKING:
    from hypothesis.strategies import SearchStrategy

EMPTY_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}
DEFAULT_QUEUE = queue_name(Tier.SMALL, Priority.INTERACTIVE)


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

    It is the producer's own message (:func:`schemas.messages.celery_job_message`) with
    the body, task name and routing key replaced: with ``args=[job_id]`` and the
    defaults it is what the producer publishes, so a mutation of one part gets past
    every other check and reaches that part's. ``message_id`` is the task id and the
    delivery tag (each message needs its own: the worker tracks unacknowledged messages
    by tag); the origin is ``fuzz``, so the same seed gives the same bytes anywhere.
    """
    message: dict[str, Any] = json.loads(
        celery_job_message(message_id, Tier.SMALL, Priority.INTERACTIVE).text
    )
    body = [args, {} if kwargs is None else kwargs, EMPTY_EMBED if embed is None else embed]
    message["body"] = _base64_json(body)
    message["headers"] |= {"task": task, "argsrepr": repr(args)[:100], "origin": "fuzz"}
    # The producer draws these at random; a fuzz case is the same bytes for the same seed.
    message["properties"] |= {"reply_to": message_id, "delivery_tag": message_id}
    message["properties"]["delivery_info"]["routing_key"] = queue
    return message


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


def raw_queue_payloads() -> SearchStrategy[bytes]:
    """Arbitrary bytes and the broken entries of :func:`random_queue_payload`."""
    from hypothesis import strategies as st

    entries = st.randoms(use_true_random=False).map(random_queue_payload)
    return st.one_of(st.binary(max_size=512), entries)
