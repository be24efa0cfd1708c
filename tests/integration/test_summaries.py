"""The nightly run on real Redis and PostgreSQL, with a scripted engine running its jobs."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from datetime import UTC, date, datetime, timedelta

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from producer.client import Client
from schemas.jobs import JobStatus
from schemas.settings import Settings
from schemas.tables import Conversation, Job, Summary, Turn
from tests.integration.test_conversations import clear_conversations
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.job_runner import run_job
from workers.summaries.night import SUMMARY_OWNER, NightRunner

pytestmark = pytest.mark.integration

DAY = date(2026, 3, 1)


@pytest.fixture
def settings(integration_settings: Settings) -> Iterator[Settings]:
    clear_conversations(integration_settings.database_url)
    yield integration_settings


def seed(
    settings: Settings, owner: str, conversation_id: str, turns: int, *, words: int = 3
) -> None:
    """A conversation with ``turns`` turns at noon of DAY (and one the day after)."""
    engine = create_engine(settings.database_url)
    noon = datetime(2026, 3, 1, 12, tzinfo=UTC)
    with Session(engine) as session, session.begin():
        session.add(Conversation(owner=owner, id=conversation_id, created_at=noon, updated_at=noon))
        for seq in range(1, turns + 2):
            role = "user" if seq % 2 else "assistant"
            content = " ".join(f"{conversation_id}-{seq}-{w}" for w in range(words))
            at = noon + timedelta(minutes=seq) if seq <= turns else noon + timedelta(days=1)
            session.add(
                Turn(
                    owner=owner,
                    conversation_id=conversation_id,
                    job_id=f"job{seq}",
                    seq=seq,
                    role=role,
                    content=content,
                    created_at=at,
                )
            )
    engine.dispose()


class FakeWorkers:
    """Runs every queued job with a scripted engine until stopped (a worker stand-in)."""

    def __init__(self, settings: Settings, engine: ScriptedEngine) -> None:
        self.runtime = runtime_for(settings, engine)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._loop, daemon=True)

    def _loop(self) -> None:
        while not self._stop.wait(0.05):
            with self.runtime.sessions() as session:
                queued = session.scalars(
                    select(Job.id).where(Job.status == JobStatus.QUEUED.value)
                ).all()
            for job_id in queued:
                run_job(self.runtime, job_id)

    def __enter__(self) -> FakeWorkers:
        self._thread.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self._stop.set()
        self._thread.join(timeout=10)


def rows(settings: Settings) -> list[Summary]:
    engine = create_engine(settings.database_url)
    with Session(engine) as session:
        found = list(session.scalars(select(Summary).order_by(Summary.conversation_id)))
    engine.dispose()
    return found


def summary_jobs(settings: Settings) -> int:
    engine = create_engine(settings.database_url)
    with Session(engine) as session:
        count = session.scalar(select(func.count()).where(Job.owner == SUMMARY_OWNER))
    engine.dispose()
    return int(count or 0)


def test_a_night_summarizes_each_conversation_once_and_a_rerun_skips(settings: Settings) -> None:
    seed(settings, "key-a", "c1", 4)
    seed(settings, "key-a", "c2", 2)
    seed(settings, "key-b", "c1", 3)  # same id, another owner: its own summary
    with Client(settings) as client, FakeWorkers(settings, ScriptedEngine(["A ", "summary."])):
        runner = NightRunner(settings, client, poll_s=0.05)
        first = runner.run(DAY, timeout_s=60)
        second = runner.run(DAY, timeout_s=60)
    assert (first.done, first.failed, first.skipped, first.remaining) == (3, 0, 0, 0)
    assert (second.done, second.failed, second.skipped) == (0, 0, 3)
    found = rows(settings)
    assert sorted((r.owner, r.conversation_id, r.status) for r in found) == [
        ("key-a", "c1", "done"),
        ("key-a", "c2", "done"),
        ("key-b", "c1", "done"),
    ]
    assert all(r.text == "A summary." and r.day == DAY for r in found)
    assert all(r.prompt_tokens > 0 and r.output_tokens == 2 for r in found)
    assert all(r.stage == "final" and r.tier == "small" for r in found)
    assert summary_jobs(settings) == 3


def test_the_day_s_turns_are_what_is_summarized(settings: Settings) -> None:
    seed(settings, "key-a", "c1", 2)
    engine = ScriptedEngine(["ok"])
    with Client(settings) as client, FakeWorkers(settings, engine):
        NightRunner(settings, client, poll_s=0.05).run(DAY, timeout_s=60)
    (rendered,) = engine.rendered
    assert rendered[0]["role"] == "system"
    transcript = rendered[1]["content"]
    assert "USER: c1-1-0" in transcript and "ASSISTANT: c1-2-0" in transcript
    assert "c1-3-0" not in transcript  # the next day's turn waits for its own night


def test_two_runners_at_once_make_one_summary_each(settings: Settings) -> None:
    for index in range(4):
        seed(settings, "key-a", f"c{index}", 2)
    with (
        Client(settings) as one,
        Client(settings) as two,
        FakeWorkers(settings, ScriptedEngine(["s"])),
    ):
        runners = [NightRunner(settings, c, poll_s=0.05) for c in (one, two)]
        with ThreadPoolExecutor(2) as pool:
            reports = list(pool.map(lambda r: r.run(DAY, timeout_s=60), runners))
    assert sorted((r.done, r.skipped) for r in reports) == [(0, 4), (4, 0)]
    assert len(rows(settings)) == 4
    assert summary_jobs(settings) == 4


def test_a_runner_that_finds_the_night_held_can_skip_it(settings: Settings) -> None:
    seed(settings, "key-a", "c1", 2)
    with Client(settings) as client:
        runner = NightRunner(settings, client, poll_s=0.05)
        client.redis.set("llmq:lock:summaries:2026-03-01", "someone-else")
        report = runner.run(DAY, on_held="skip")
    assert report.held_elsewhere and report.total == 0
    assert rows(settings) == []


def test_a_long_day_is_summarized_map_reduce(settings: Settings) -> None:
    seed(settings, "key-a", "long", 12, words=20)
    # Room for about two turns per step, after the ~150-token prompt and the answer.
    tight = settings.model_copy(update={"summary_context_tokens": 560, "summary_max_tokens": 16})
    with Client(tight) as client, FakeWorkers(tight, ScriptedEngine(["part"])):
        runner = NightRunner(tight, client, poll_s=0.05)
        assert runner.chunks_for(runner.candidates(DAY)[0], DAY) > 1
        report = runner.run(DAY, timeout_s=60)
    assert report.done == 1
    (summary,) = rows(tight)
    assert summary.status == "done" and summary.stage == "final" and summary.text == "part"
    assert summary_jobs(tight) > 2  # the map jobs, then the final one


def test_a_failing_step_is_retried_then_recorded_failed(settings: Settings) -> None:
    seed(settings, "key-a", "c1", 2)
    with Client(settings) as client, FakeWorkers(settings, ScriptedEngine(["a", "b"], fail=True)):
        report = NightRunner(settings, client, poll_s=0.05).run(DAY, timeout_s=60)
    assert (report.done, report.failed) == (0, 1)
    (summary,) = rows(settings)
    assert summary.status == "failed" and summary.attempts == settings.summary_max_attempts
    assert "device lost" in (summary.error or "")
    assert report.failures == {"c1": summary.error}
    assert summary_jobs(settings) == settings.summary_max_attempts
