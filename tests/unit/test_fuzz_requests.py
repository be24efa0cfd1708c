"""A thousand bad requests each: a clear ``InvalidRequest`` or acceptance, never a crash."""

from __future__ import annotations

import base64
import json
from types import SimpleNamespace

from celery import Celery
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench.fuzz import bad_request_payloads, check_request, fuzz_cases
from bench.fuzz_values import json_values
from bench.queue_fuzz import DEFAULT_QUEUE, raw_queue_payloads, task_message
from producer.submission import parse_request
from schemas.errors import InvalidRequest
from schemas.queues import GENERATE_TASK
from workers.app import generate_task

THOROUGH = settings(max_examples=1000, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@THOROUGH
@given(bad_request_payloads())
def test_a_bad_request_is_accepted_or_refused_with_a_message(payload: object) -> None:
    try:
        parse_request(payload)  # type: ignore[arg-type]
    except InvalidRequest as exc:
        assert str(exc).strip()


@THOROUGH
@given(bad_request_payloads())
def test_a_bad_gateway_body_is_accepted_or_refused_with_a_message(payload: object) -> None:
    assert check_request(payload) is None


def _not_a_job_id(value: object) -> bool:
    return not (isinstance(value, str) and value)


@THOROUGH
@given(json_values().filter(_not_a_job_id), st.lists(json_values(), max_size=3))
def test_the_task_drops_a_malformed_job_id_without_touching_the_engine(
    job_id: object, extra: list[object]
) -> None:
    # No runtime at all: a message that got this far must be refused before it is used.
    task = SimpleNamespace(app=SimpleNamespace(runtime=None))
    generate_task(task, job_id, *extra)
    generate_task(task, job_id=job_id, extra=extra)


def test_the_seeded_cases_are_the_same_for_the_same_seed() -> None:
    first, again, other = fuzz_cases(50, seed=7), fuzz_cases(50, seed=7), fuzz_cases(50, seed=8)
    # repr, because NaN never equals itself.
    assert repr(first) == repr(again)
    assert repr(first) != repr(other)
    assert len(first.requests) == len(first.queue_payloads) == 50
    assert all(isinstance(payload, bytes) for payload in first.queue_payloads)


@settings(max_examples=50, deadline=None)
@given(raw_queue_payloads())
def test_raw_queue_payloads_are_bytes_redis_can_store(payload: bytes) -> None:
    assert isinstance(payload, bytes)


def test_the_well_formed_task_message_is_what_celery_publishes() -> None:
    app = Celery("fuzz-check", broker="memory://", set_as_current=False)
    app.conf.task_serializer = "json"
    job_id = "a" * 32
    app.send_task(GENERATE_TASK, args=[job_id], queue=DEFAULT_QUEUE, task_id=job_id)
    with app.connection() as connection:
        published = connection.default_channel._get(DEFAULT_QUEUE)
    ours = task_message([job_id], message_id=job_id)
    assert set(ours) == set(published)
    assert set(ours["headers"]) == set(published["headers"])
    assert ours["headers"]["task"] == published["headers"]["task"]
    assert set(ours["properties"]) <= set(published["properties"])
    for key in ("content-type", "content-encoding"):
        assert ours[key] == published[key]
    assert _decoded_body(ours) == _decoded_body(published)


def _decoded_body(message: dict[str, object]) -> object:
    return json.loads(base64.b64decode(str(message["body"])))
