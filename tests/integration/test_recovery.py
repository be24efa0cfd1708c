"""Recovery against real Redis and PostgreSQL: dead workers, re-runs, cancels, deadlines.

The engine is scripted (tests/e2e kill real workers); what is pinned down here is
the bookkeeping: rows, attempts, and the stream a listening client sees.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

import pytest
import redis
from sqlalchemy import update

from bench.redis_server import RedisServer
from producer.client import Client
from schemas.errors import JobCancelled, JobFailed
from schemas.events import AttemptEvent, ErrorEvent, FinalEvent, TokenEvent, parse_event
from schemas.jobs import JobStatus
from schemas.queues import Priority, Tier, event_log_key
from schemas.settings import Settings
from schemas.tables import Job
from tests.conftest import job_row
from tests.integration.test_runner import ScriptedEngine, ScriptedStream, runtime_for
from workers.job_runner import run_job
from workers.jobs import claim_job
from workers.publisher import StreamPublisher
from workers.reaper import Reaper
from workers.running_jobs import CancelListener
from workers.worker_runtime import WorkerRuntime

pytestmark = pytest.mark.integration

REQUEST = {"messages": [{"role": "user", "content": "count to ten"}], "max_tokens": 10}


class SentJobs:
    """Records what a reaper sends instead of publishing it."""

    def __init__(self) -> None:
        self.sent: list[tuple[str, Tier, Priority]] = []

    def __call__(self, job_id: str, tier: Tier, priority: Priority) -> None:
        self.sent.append((job_id, tier, priority))


def reaper_for(settings: Settings, send: SentJobs, *, max_attempts: int = 3) -> Reaper:
    runtime = runtime_for(settings, ScriptedEngine([]))
    return Reaper(
        sessions=runtime.sessions,
        redis=runtime.redis,
        send=send,
        max_attempts=max_attempts,
        replay_ttl_s=60,
        grace_s=0.0,
    )


def die_mid_stream(settings: Settings, job_id: str, chunks: list[str], worker_id: str) -> None:
    """What a worker that was killed after streaming ``chunks`` leaves behind."""
    runtime = runtime_for(settings, ScriptedEngine([]))
    claimed = claim_job(runtime.sessions, job_id, worker_id)
    assert claimed is not None
    publisher = StreamPublisher(runtime.redis, job_id, ttl_s=60)
    if claimed.attempt > 1:
        publisher.resume(claimed.attempt)
    for chunk in chunks:
        publisher.token(chunk)


def test_a_dead_workers_job_is_requeued_and_resumed_into_one_text(
    integration_settings: Settings,
) -> None:
    send = SentJobs()
    reaper = reaper_for(integration_settings, send)
    reaper.run_once()  # the first look at an empty Redis re-sends queued jobs: none yet
    engine = ScriptedEngine([" three", " four"])
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        listener = handle.events(timeout=20)
        die_mid_stream(integration_settings, handle.job_id, ["one", " two"], "small-1@gone")
        assert isinstance(next(listener), TokenEvent)
        assert reaper.run_once() == 1
        assert send.sent == [(handle.job_id, Tier.SMALL, Priority.INTERACTIVE)]
        assert client.status(handle.job_id) is JobStatus.QUEUED
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        events = [*listener]
    assert [event.seq for event in events] == list(range(1, 6))
    attempt = events[1]
    assert isinstance(attempt, AttemptEvent)
    assert (attempt.attempt, attempt.resumed_chars) == (2, len("one two"))
    final = events[-1]
    assert isinstance(final, FinalEvent)
    streamed = ["one"] + [e.text for e in events if isinstance(e, TokenEvent)]
    assert "".join(streamed) == final.text == "one two three four"
    # The new attempt continued after the streamed text, within the same token budget.
    assert engine.prompts[0][-2:] == [2, 2]
    assert engine.seen[0].max_tokens == 10 - 2
    row = job_row(integration_settings.database_url, handle.job_id)
    assert (row.status, row.attempts, row.output_text) == ("done", 2, final.text)


def test_a_live_workers_job_is_left_alone(integration_settings: Settings) -> None:
    send = SentJobs()
    reaper = reaper_for(integration_settings, send)
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        die_mid_stream(integration_settings, handle.job_id, ["one"], "small-2@alive")
        client.redis.hset("llmq:worker:small-2@alive", "tier", '"small"')
        reaper.run_once()
        assert client.status(handle.job_id) is JobStatus.RUNNING
    assert send.sent == []


def test_a_job_whose_worker_dies_every_time_is_dead_lettered(
    integration_settings: Settings,
) -> None:
    send = SentJobs()
    reaper = reaper_for(integration_settings, send, max_attempts=2)
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        for attempt in (1, 2):
            die_mid_stream(integration_settings, handle.job_id, ["x"], f"small-{attempt}@gone")
            reaper.run_once()
        assert client.status(handle.job_id) is JobStatus.DEAD_LETTER
        with pytest.raises(JobFailed, match="dead-lettered") as dead:
            handle.result(timeout=5)
        assert type(dead.value) is JobFailed  # neither cancelled nor expired
        last = list(client.events(handle.job_id, timeout=5))[-1]
        assert isinstance(last, ErrorEvent) and last.status == "dead_letter"
        engine = ScriptedEngine(["never"])
        run_job(runtime_for(integration_settings, engine), handle.job_id)
    assert engine.seen == []
    assert [job_id for job_id, _, _ in send.sent] == [handle.job_id]


def test_an_attempt_that_lost_its_job_cannot_record_an_outcome(
    integration_settings: Settings,
) -> None:
    send = SentJobs()
    reaper = reaper_for(integration_settings, send)
    slow = ScriptedEngine(["late ", "text"], delay_s=0.3)
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        cut_off = threading.Thread(
            target=run_job, args=(runtime_for(integration_settings, slow), handle.job_id)
        )
        cut_off.start()
        time.sleep(0.15)  # claimed by a worker that is not in the registry
        reaper.run_once()
        run_job(runtime_for(integration_settings, ScriptedEngine([" fresh"])), handle.job_id)
        cut_off.join()
        row = job_row(integration_settings.database_url, handle.job_id)
    assert row.status == "done"
    assert row.output_text is not None and row.output_text.endswith(" fresh")
    assert row.attempts == 2


def test_queued_jobs_are_sent_again_once_when_redis_lost_its_data(
    integration_settings: Settings,
) -> None:
    with Client(integration_settings) as client:
        handles = [client.submit(REQUEST, tier="small") for _ in range(3)]
        first, second, after_loss = SentJobs(), SentJobs(), SentJobs()
        reaper_for(integration_settings, first).run_once()
        reaper_for(integration_settings, second).run_once()
        client.redis.flushdb()  # what a restart without persistence does
        reaper_for(integration_settings, after_loss).run_once()
    queued = sorted(h.job_id for h in handles)
    assert sorted(job_id for job_id, _, _ in first.sent) == queued
    assert second.sent == []  # one worker of the tier does it, once
    assert sorted(job_id for job_id, _, _ in after_loss.sent) == queued


def test_a_queued_job_cancelled_never_runs(integration_settings: Settings) -> None:
    engine = ScriptedEngine(["no"])
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        handle.cancel()
        assert client.status(handle.job_id) is JobStatus.CANCELLED
        with pytest.raises(JobCancelled, match="cancelled by its client"):
            handle.result(timeout=5)
        run_job(runtime_for(integration_settings, engine), handle.job_id)
    assert engine.seen == []


def test_a_running_job_cancelled_stops_in_the_engine(integration_settings: Settings) -> None:
    engine = ScriptedEngine([f"w{i} " for i in range(50)], delay_s=0.05)
    runtime = runtime_for(integration_settings, engine)
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        worker = threading.Thread(target=run_job, args=(runtime, handle.job_id))
        worker.start()
        events = handle.events(timeout=20)
        assert isinstance(next(events), TokenEvent)
        assert runtime.running.cancel(handle.job_id)  # what the cancel listener does
        rest = list(events)
        worker.join()
        assert client.status(handle.job_id) is JobStatus.CANCELLED
    assert isinstance(rest[-1], ErrorEvent)
    assert rest[-1].message == "cancelled by its client"
    assert rest[-1].status == "cancelled"
    assert len(rest) < 20  # aborted long before its 50 chunks


def test_a_cancel_sent_before_the_worker_listened_is_still_honoured(
    integration_settings: Settings,
) -> None:
    engine = ScriptedEngine([f"w{i} " for i in range(50)], delay_s=0.05)
    runtime = runtime_for(integration_settings, engine)
    listener = CancelListener(runtime.redis, runtime.running)
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST)
        claim_job(runtime.sessions, handle.job_id, "small-x@gone")  # running elsewhere
        handle.cancel()  # leaves the cancel key; nobody listens yet
        # The job is re-run (its first worker was lost); the listener finds the key.
        with runtime.sessions.begin() as session:
            session.execute(update(Job).where(Job.id == handle.job_id).values(status="queued"))
        listener.start()
        try:
            run_job(runtime, handle.job_id)
        finally:
            listener.stop()
        assert client.status(handle.job_id) is JobStatus.CANCELLED
    assert len(engine.prompts) == 1


def test_a_job_past_its_deadline_is_stopped_and_says_why(integration_settings: Settings) -> None:
    engine = ScriptedEngine([f"w{i} " for i in range(50)], delay_s=0.05)
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST, deadline_s=0.5)
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        with pytest.raises(JobFailed, match="deadline"):
            handle.result(timeout=5)
        row = job_row(integration_settings.database_url, handle.job_id)
    assert row.status == "failed"
    assert row.error is not None and "deadline" in row.error


def wait_until_down(url: str, timeout_s: float = 10.0) -> None:
    probe = redis.Redis.from_url(url, socket_connect_timeout=0.2, socket_timeout=0.2)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            probe.ping()
        except redis.ConnectionError:
            return
        finally:
            probe.close()
        time.sleep(0.01)
    raise AssertionError("Redis did not go down")


def test_a_publisher_rewrites_a_log_that_a_redis_restart_lost(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        publisher = StreamPublisher(client, "job1", ttl_s=60)
        publisher.token("a")
        publisher.token("b")
        restart = threading.Thread(target=server.restart, kwargs={"down_s": 1.0})
        restart.start()
        wait_until_down(server.url)
        publisher.token("c")  # Redis is down now; this waits for it
        restart.join()
        raw_log = client.lrange(event_log_key("job1"), 0, -1)
        log = [raw.decode() if isinstance(raw, bytes) else raw for raw in raw_log]
    finally:
        server.stop()
    assert [TokenEvent.model_validate_json(raw).text for raw in log] == ["a", "b", "c"]
    assert [TokenEvent.model_validate_json(raw).seq for raw in log] == [0, 1, 2]


def test_prompts_and_outputs_stay_out_of_the_logs(
    integration_settings: Settings, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level("INFO")
    secret_prompt, secret_output = "my card number is 4111", "noted your 4111 card"
    engine = ScriptedEngine([secret_output])
    with Client(integration_settings) as client:
        handle = client.submit(secret_prompt)
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        failing = client.submit(secret_prompt)
        run_job(
            runtime_for(integration_settings, ScriptedEngine(["a", "b"], fail=True)), failing.job_id
        )
        assert handle.result(timeout=5).text == secret_output
    assert caplog.records  # the runner does log, just not the text
    assert "4111" not in caplog.text


def _run_until(runtime: WorkerRuntime, job_id: str, ready: Callable[[], bool]) -> threading.Thread:
    worker = threading.Thread(target=run_job, args=(runtime, job_id))
    worker.start()
    deadline = time.monotonic() + 20
    while not ready():
        assert time.monotonic() < deadline, "the job never got going"
        time.sleep(0.01)
    return worker


def test_a_batch_job_that_gives_way_goes_back_to_its_queue_unseen(
    integration_settings: Settings,
) -> None:
    sent: list[tuple[str, Tier, Priority]] = []
    engine = ScriptedEngine(["never ", "seen"], delay_s=2.0)  # nothing before the halt
    runtime = replace(
        runtime_for(integration_settings, engine),
        resend=lambda *message: sent.append(message),
    )
    with Client(integration_settings) as client:
        handle = client.submit(REQUEST, priority="batch")
        worker = _run_until(runtime, handle.job_id, lambda: bool(engine.seen))
        assert runtime.running.yield_batch(keep=0) == [handle.job_id]
        worker.join(timeout=10)
        assert client.status(handle.job_id) is JobStatus.QUEUED
        assert sent == [(handle.job_id, Tier.SMALL, Priority.BATCH)]
        row = job_row(integration_settings.database_url, handle.job_id)
        assert row.attempts == 0  # giving way spends no attempt
        assert runtime.redis.llen(event_log_key(handle.job_id)) == 0  # nothing published
        # Its next run starts afresh and gives the one answer.
        run_job(runtime_for(integration_settings, ScriptedEngine(["all ", "done"])), handle.job_id)
        assert handle.result(timeout=5).text == "all done"
        events = list(client.events(handle.job_id, timeout=5))
    assert not any(isinstance(event, AttemptEvent) for event in events)
    assert job_row(integration_settings.database_url, handle.job_id).attempts == 1


def test_a_batch_job_that_gave_way_goes_on_from_what_it_had_generated(
    integration_settings: Settings,
) -> None:
    # As the engine does, the batch answer is held to its end: nothing is published
    # while it runs, and what it holds is published as it gives way.
    engine = ScriptedEngine([f"w{i} " for i in range(50)], delay_s=0.05, hold_batch=True)
    stream_held: list[ScriptedStream] = []
    original = engine.stream

    def keeping(*args: Any, **kwargs: Any) -> ScriptedStream:
        stream_held.append(original(*args, **kwargs))
        return stream_held[-1]

    engine.stream = keeping  # type: ignore[method-assign]
    runtime = replace(runtime_for(integration_settings, engine), resend=lambda *_: None)
    with Client(integration_settings) as client:
        handle = client.submit({**REQUEST, "max_tokens": 64}, priority="batch")
        worker = _run_until(runtime, handle.job_id, lambda: _held_words(stream_held) >= 3)
        log_key = event_log_key(handle.job_id)
        assert runtime.redis.llen(log_key) == 0  # held, not streamed
        runtime.running.yield_batch(keep=0)
        worker.join(timeout=10)
        assert client.status(handle.job_id) is JobStatus.QUEUED
        assert job_row(integration_settings.database_url, handle.job_id).attempts == 0
        logged = [parse_event(raw) for raw in runtime.redis.lrange(log_key, 0, -1)]
        kept = "".join(event.text for event in logged if isinstance(event, TokenEvent))
        assert kept.startswith("w0 w1 w2 ")
        again = ScriptedEngine(["end"], hold_batch=True)
        run_job(runtime_for(integration_settings, again), handle.job_id)
        text = handle.result(timeout=5).text
        events = list(client.events(handle.job_id, timeout=5))
    # The next run was asked to go on from the kept text, not to write it again.
    assert len(again.prompts[0]) == len(engine.prompts[0]) + len(kept.split())
    assert again.seen[0].max_tokens == 64 - len(kept.split())
    streamed = "".join(e.text for e in events if isinstance(e, TokenEvent))
    assert text == streamed == kept + "end"  # one coherent answer, no token twice
    assert [e.attempt for e in events if isinstance(e, AttemptEvent)] == [1]
    assert job_row(integration_settings.database_url, handle.job_id).attempts == 1


def _held_words(streams: list[ScriptedStream]) -> int:
    held = streams[-1].held() if streams else None
    return 0 if held is None else len(held.text.split())
