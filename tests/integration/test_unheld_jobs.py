"""Rows left ``running`` under a live worker that no longer holds them are recovered.

A worker reports the jobs whose tasks it runs with every heartbeat; the reaper sends
again a running row its live worker has not held for the grace, and leaves alone the
rows a worker holds or a worker too old to say. Real Redis and PostgreSQL.
"""

from __future__ import annotations

from types import SimpleNamespace

import pytest
import redis

from producer.client import Client
from schemas.jobs import JobStatus
from schemas.queues import Priority, Tier
from schemas.registry import read_entries
from schemas.settings import Settings
from tests.integration.test_recovery import REQUEST, SentJobs, die_mid_stream
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers import app as worker_app
from workers.reaper import Reaper
from workers.registry import WorkerRegistration

pytestmark = pytest.mark.integration

WORKER = "small-7@alive"


def reaper_for(settings: Settings, send: SentJobs, *, grace_s: float = 0.0) -> Reaper:
    runtime = runtime_for(settings, ScriptedEngine([]))
    return Reaper(
        sessions=runtime.sessions,
        redis=runtime.redis,
        send=send,
        max_attempts=3,
        replay_ttl_s=60,
        grace_s=0.0,
        unheld_grace_s=grace_s,
    )


def heartbeat(settings: Settings, held: list[str] | None) -> None:
    """One heartbeat of a live worker holding ``held`` (None: one too old to report)."""
    client = redis.Redis.from_url(settings.broker_url)
    beat = WorkerRegistration(client, worker_id=WORKER, tier=Tier.SMALL, concurrency=4)
    if held is not None:
        beat.track(lambda: len(held), held=lambda: list(held))
    beat._write()
    client.close()


def test_a_running_row_its_live_worker_does_not_hold_is_sent_again(
    integration_settings: Settings,
) -> None:
    send = SentJobs()
    reaper = reaper_for(integration_settings, send)
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        die_mid_stream(integration_settings, handle.job_id, ["one"], WORKER)
        heartbeat(integration_settings, held=[])  # alive, holding nothing
        reaper.run_once()
        assert client.status(handle.job_id) is JobStatus.QUEUED
    assert send.sent == [(handle.job_id, Tier.SMALL, Priority.INTERACTIVE)]


def test_held_rows_and_rows_of_workers_that_do_not_report_are_left_alone(
    integration_settings: Settings,
) -> None:
    send = SentJobs()
    reaper = reaper_for(integration_settings, send)
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        die_mid_stream(integration_settings, handle.job_id, ["one"], WORKER)
        heartbeat(integration_settings, held=[handle.job_id])
        reaper.run_once()
        assert client.status(handle.job_id) is JobStatus.RUNNING
        heartbeat(integration_settings, held=None)  # an older worker: it does not say
        reaper.run_once()
        assert client.status(handle.job_id) is JobStatus.RUNNING
    assert send.sent == []


def test_an_unheld_row_waits_out_the_grace(integration_settings: Settings) -> None:
    send = SentJobs()
    reaper = reaper_for(integration_settings, send, grace_s=30.0)
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        die_mid_stream(integration_settings, handle.job_id, ["one"], WORKER)
        heartbeat(integration_settings, held=[])
        reaper.run_once()  # the claim may predate the heartbeat that shows it
        reaper.run_once()
        assert client.status(handle.job_id) is JobStatus.RUNNING
        key = next(iter(reaper._unheld_since))
        reaper._unheld_since[key] -= 31.0  # half a minute later, still not held
        reaper.run_once()
        assert client.status(handle.job_id) is JobStatus.QUEUED
    assert [job_id for job_id, _, _ in send.sent] == [handle.job_id]


def test_a_worker_holds_a_job_while_its_task_runs_and_reports_it(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    runtime = runtime_for(integration_settings, ScriptedEngine([]))
    client = redis.Redis.from_url(integration_settings.broker_url)
    beat = WorkerRegistration(client, worker_id=WORKER, tier=Tier.SMALL, concurrency=4)
    beat.track(lambda: 0, held=runtime.held.ids)
    seen: list[list[str] | None] = []

    def run_job(*_args: object) -> None:
        beat._write()
        seen.extend(entry.held_jobs for entry in read_entries(client))

    monkeypatch.setattr(worker_app, "run_job", run_job)
    job_id = "0" * 32
    task = SimpleNamespace(app=SimpleNamespace(runtime=runtime))
    worker_app.generate_task(task, job_id)  # type: ignore[arg-type]
    beat._write()
    after = [entry.held_jobs for entry in read_entries(client)]
    client.close()
    assert seen == [[job_id]]
    assert after == [[]]
