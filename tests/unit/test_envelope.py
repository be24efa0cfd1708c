"""Only job messages shaped like the producer's reach Celery; anything else is dropped."""

from __future__ import annotations

import base64
import json
import random

from celery import Celery

from bench.queue_fuzz import DEFAULT_QUEUE, random_queue_payload, task_message
from schemas.messages import celery_job_message
from schemas.queues import GENERATE_TASK, Priority, Tier, queue_name
from workers.envelope import envelope_problem

JOB_ID = "b" * 32


def test_the_producers_own_message_passes() -> None:
    app = Celery("envelope-check", broker="memory://", set_as_current=False)
    app.conf.task_serializer = "json"
    app.send_task(GENERATE_TASK, args=[JOB_ID], queue=DEFAULT_QUEUE, task_id=JOB_ID)
    with app.connection() as connection:
        published = connection.default_channel._get(DEFAULT_QUEUE)
    assert envelope_problem(published) is None
    assert envelope_problem(task_message([JOB_ID], message_id=JOB_ID)) is None


def test_messages_that_stopped_or_froze_a_worker_are_refused() -> None:
    odd_tag = task_message([JOB_ID], message_id=JOB_ID)
    odd_tag["properties"]["delivery_tag"] = True
    assert envelope_problem(odd_tag) == "not a job message (1 problem(s))"
    unpacks_badly = task_message([JOB_ID], message_id=JOB_ID)
    unpacks_badly["body"] = "WyJhYmMiXQ=="  # ["abc"]
    assert envelope_problem(unpacks_badly) == "its body is not [args, kwargs, embed]"
    no_type = task_message([JOB_ID], message_id=JOB_ID)
    no_type["content-type"] = ""
    assert envelope_problem(no_type) is not None
    chained = task_message([JOB_ID], message_id=JOB_ID, embed={"callbacks": [{"task": "x"}]})
    assert envelope_problem(chained) == "it carries callbacks or chains"
    other_task = task_message([JOB_ID], message_id=JOB_ID, task="celery.backend_cleanup")
    assert envelope_problem(other_task) is not None
    assert envelope_problem([[[]]]) is not None


def test_a_thousand_random_queue_entries_get_an_answer_not_an_exception() -> None:
    rng = random.Random(11)
    refused = 0
    for _ in range(1000):
        raw = random_queue_payload(rng)
        try:
            message = json.loads(raw)
        except (ValueError, RecursionError):
            continue  # the channel drops what is not JSON before this check
        refused += envelope_problem(message) is not None
    assert refused > 500


def test_job_ids_no_job_can_have_are_refused_before_the_claim() -> None:
    # A database refuses to compare such ids; the claim's error would be retried forever.
    for job_id in ("\x00", "", "x" * 33, "\ud800", 7, None):
        message = task_message([job_id], message_id=JOB_ID)
        assert envelope_problem(message) == "its job id is not one any job can have"
    assert envelope_problem(task_message([JOB_ID, "extra"], message_id=JOB_ID)) is not None


def test_headers_celery_acts_on_must_have_types_it_can_act_on() -> None:
    # Each of these reached the pool and failed there, holding a prefetch slot for ever.
    for name, value in (
        ("timelimit", [1, 2, 3]),
        ("timelimit", "soon"),
        ("retries", "x"),
        ("retries", -1),
        ("eta", "not a date"),
        ("eta", "2999-01-01T00:00:00"),
        ("expires", [1]),
        ("ignore_result", "yes"),
    ):
        message = task_message([JOB_ID], message_id=JOB_ID)
        message["headers"][name] = value
        assert envelope_problem(message) is not None, (name, value)
    fine = task_message([JOB_ID], message_id=JOB_ID)
    fine["headers"] |= {"timelimit": [None, 5.5], "retries": 2, "eta": None}
    assert envelope_problem(fine) is None


def test_the_producers_direct_message_is_what_celery_would_send() -> None:
    app = Celery("envelope-check", broker="memory://", set_as_current=False)
    app.conf.task_serializer = "json"
    queue = queue_name(Tier.SMALL, Priority.INTERACTIVE)
    app.send_task(GENERATE_TASK, args=[JOB_ID], queue=queue, routing_key=queue, task_id=JOB_ID)
    with app.connection() as connection:
        celerys = connection.default_channel._get(queue)
    message = celery_job_message(JOB_ID, Tier.SMALL, Priority.INTERACTIVE)
    assert not message.carries_request
    ours = json.loads(message.text)
    assert envelope_problem(ours) is None
    assert json.loads(base64.b64decode(ours["body"])) == json.loads(
        base64.b64decode(celerys["body"])
    )
    for volatile in ("origin",):
        celerys["headers"].pop(volatile)
        ours["headers"].pop(volatile)
    assert ours["headers"] == celerys["headers"]
    for volatile in ("reply_to", "delivery_tag"):
        celerys["properties"].pop(volatile)
        ours["properties"].pop(volatile)
    assert ours["properties"] == celerys["properties"]


def test_a_copy_of_the_request_passes_and_other_keywords_do_not() -> None:
    request = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    message = celery_job_message(JOB_ID, Tier.SMALL, Priority.INTERACTIVE, request=request)
    assert message.carries_request
    with_copy = json.loads(message.text)
    assert envelope_problem(with_copy) is None
    _args, kwargs, _embed = json.loads(base64.b64decode(with_copy["body"]))
    assert kwargs == {"request": request, "priority": "interactive"}
    other = task_message([JOB_ID], message_id=JOB_ID)
    other["body"] = base64.b64encode(
        json.dumps([[JOB_ID], {"request": request, "eval": "x"}, {}]).encode()
    ).decode()
    assert envelope_problem(other) == (
        f"{GENERATE_TASK} takes no keywords but the job's request and priority"
    )
