"""Fuzzing the real doors: a running gateway over HTTP, ``Client.submit``, cross-key access.

No worker runs: interactive requests are refused with 503 (no warm worker), batch
requests are queued and streamed, and every job the fuzzers make is left queued or
cancelled. The benchmark runs the same functions with more cases.
"""

from __future__ import annotations

import pytest
from sqlalchemy import func, select

from bench.cross_key import cross_key_probe
from bench.http_fuzz import fuzz_gateway
from bench.submit_fuzz import fuzz_submit
from producer.client import Client
from producer.gateway.keys import KeyIdentity, create_key
from schemas.db import make_engine, make_sessions
from schemas.jobs import JobStatus
from schemas.settings import Settings
from schemas.tables import Job
from tests.gateway_server import running_gateway

pytestmark = pytest.mark.integration

HTTP_CASES = 300
SUBMIT_CASES = 200
SEED = 11


def new_keys(settings: Settings, count: int) -> list[tuple[KeyIdentity, str]]:
    engine = make_engine(settings.database_url)
    sessions = make_sessions(engine)
    # A generous rate: the fuzzer sends hundreds of requests a minute.
    keys = [create_key(sessions, f"fuzz-{i}", rate_limit_per_min=100_000) for i in range(count)]
    engine.dispose()
    return keys


def count_jobs(client: Client, *conditions: object) -> int:
    with client.sessions() as session:
        return int(session.scalar(select(func.count()).select_from(Job).where(*conditions)) or 0)


def test_hostile_http_requests_get_no_server_error(integration_settings: Settings) -> None:
    (mine, secret), (_, second), (stranger, _) = new_keys(integration_settings, 3)
    with Client(integration_settings) as client:
        theirs = client.submit("their job", tier="small", priority="batch", owner=stranger.id)
        ended = client.submit("my old job", tier="small", priority="batch", owner=mine.id)
        ended.cancel()
        waiting = client.submit("my job", tier="small", priority="batch", owner=mine.id)
        with running_gateway(integration_settings) as url:
            report = fuzz_gateway(
                url,
                api_keys=[secret, second],
                other_job_ids=[theirs.job_id],
                own_job_ids=[ended.job_id, waiting.job_id],
                cases=HTTP_CASES,
                seed=SEED,
            )
        # Fuzzing with another key's job id left that job alone.
        assert client.status(theirs.job_id) == JobStatus.QUEUED
    assert report.http_fuzz_cases == HTTP_CASES
    assert report.http_5xx == 0, report.failures
    assert report.transport_errors == 0, report.failures
    # Redis and the database are up: a 503 may only say that no worker is warm.
    assert set(report.http_503_codes) <= {"no_warm_worker"}, report.http_503_codes
    # The cases reach past the doors: accepted, refused, unknown, unauthenticated.
    assert {200, 400, 401, 404} <= set(report.statuses), report.statuses


def test_bad_submits_raise_only_llmq_errors(integration_settings: Settings) -> None:
    with Client(integration_settings) as client:
        report = fuzz_submit(client, cases=SUBMIT_CASES, seed=SEED)
        left_queued = count_jobs(client, Job.status == JobStatus.QUEUED.value)
    assert report.submit_fuzz_cases == SUBMIT_CASES
    assert report.submit_crashes == 0, report.failures
    assert report.submit_unavailable == 0, report.failures
    # Both sides are exercised: jobs made (and cancelled at once) and requests refused.
    assert report.accepted > 0
    assert {"InvalidRequest", "PromptTooLong"} <= set(report.refused), report.refused
    assert left_queued == 0


def test_one_key_cannot_see_or_touch_another_keys_jobs(integration_settings: Settings) -> None:
    (_, secret_a), (_, secret_b) = new_keys(integration_settings, 2)
    with Client(integration_settings) as client, running_gateway(integration_settings) as url:
        report = cross_key_probe(url, secret_a, secret_b, client=client)
        left_queued = count_jobs(client, Job.status == JobStatus.QUEUED.value)
    assert report.cross_key_attempts >= 40
    assert report.cross_key_reads == 0, report.failures
    assert left_queued == 0


def test_the_probe_counts_what_a_key_sees_of_its_own_jobs(
    integration_settings: Settings,
) -> None:
    # The probe's own check: a key is allowed everything on its own jobs, and the
    # probe must count those as reads, or a zero above would prove nothing.
    ((_, secret),) = new_keys(integration_settings, 1)
    with Client(integration_settings) as client, running_gateway(integration_settings) as url:
        report = cross_key_probe(url, secret, secret, client=client)
    kinds = " ".join(report.failures)
    assert report.cross_key_reads >= 10, report.failures
    for kind in ("GET /v1/jobs/", "cancel", "resume", "idempotency"):
        assert kind in kinds
