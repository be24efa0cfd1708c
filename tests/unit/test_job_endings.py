"""How a job that ended without an answer reaches its caller: event, exception, HTTP."""

from __future__ import annotations

import pydantic
import pytest

from producer.gateway.errors import http_error_for
from schemas.errors import JobCancelled, JobExpired, JobFailed, job_ended
from schemas.events import ErrorEvent, error_event, parse_event
from schemas.jobs import JobStatus


def test_an_error_event_says_how_the_job_ended() -> None:
    event = error_event(3, "cancelled by its client", JobStatus.CANCELLED)
    assert parse_event(event.model_dump_json()) == event
    assert event.status == "cancelled"


def test_an_error_event_written_before_statuses_reads_as_failed() -> None:
    old = parse_event('{"type": "error", "seq": 2, "message": "device lost"}')
    assert isinstance(old, ErrorEvent)
    assert old.status == "failed"


def test_a_finished_job_cannot_end_in_an_error_event() -> None:
    with pytest.raises(pydantic.ValidationError):
        error_event(1, "fine", JobStatus.DONE)


@pytest.mark.parametrize(
    ("status", "kind", "words"),
    [
        ("cancelled", JobCancelled, "job j1 cancelled: stop"),
        ("expired", JobExpired, "job j1 expired: stop"),
        ("failed", JobFailed, "job j1 failed: stop"),
        ("dead_letter", JobFailed, "job j1 failed: stop"),
    ],
)
def test_the_caller_gets_an_error_of_its_ending(
    status: str, kind: type[JobFailed], words: str
) -> None:
    error = job_ended("j1", "stop", status)
    assert type(error) is kind
    assert isinstance(error, JobFailed)  # code that catches JobFailed still does
    assert str(error) == words


def test_the_gateway_does_not_call_a_cancelled_or_expired_job_a_server_error() -> None:
    cancelled = http_error_for(job_ended("j", "cancelled by its client", "cancelled"))
    assert (cancelled.status, cancelled.code) == (409, "job_cancelled")
    expired = http_error_for(job_ended("j", "its deadline passed", "expired"))
    assert (expired.status, expired.code) == (504, "job_expired")
    failed = http_error_for(job_ended("j", "device lost", "failed"))
    assert (failed.status, failed.kind) == (500, "server_error")
