"""A seeded day of conversations summarized by the real engine through the batch queue."""

from __future__ import annotations

from datetime import date

import pytest
from sqlalchemy import create_engine, func, select
from sqlalchemy.orm import Session

from producer.client import Client
from schemas.settings import Settings
from schemas.tables import Job, Summary
from tests.integration.test_conversations import clear_conversations
from tests.integration.test_summaries import seed
from workers.summaries.night import SUMMARY_OWNER, NightRunner

pytestmark = pytest.mark.e2e

DAY = date(2026, 3, 1)


def test_a_seeded_day_gets_one_summary_each_and_a_long_one_map_reduce(
    e2e_settings: Settings, worker: str
) -> None:
    clear_conversations(e2e_settings.database_url)
    for name in ("short-a", "short-b"):
        seed(e2e_settings, "key-a", name, 2, words=4)
    seed(e2e_settings, "key-b", "long", 8, words=25)
    # A tiny step context forces the long day into several chunks; short ones still fit.
    settings = e2e_settings.model_copy(
        update={"summary_context_tokens": 600, "summary_max_tokens": 24}
    )
    with Client(settings) as client:
        runner = NightRunner(settings, client, poll_s=0.2)
        shapes = {c.conversation_id: runner.chunks_for(c, DAY) for c in runner.candidates(DAY)}
        assert shapes["short-a"] == shapes["short-b"] == 1 and shapes["long"] > 1
        report = runner.run(DAY, timeout_s=240)
        again = runner.run(DAY, timeout_s=60)
    assert (report.done, report.failed, report.remaining) == (3, 0, 0), report.failures
    assert (again.done, again.skipped) == (0, 3)
    engine = create_engine(settings.database_url)
    with Session(engine) as session:
        summaries = list(session.scalars(select(Summary)))
        jobs = session.scalar(select(func.count()).where(Job.owner == SUMMARY_OWNER))
        priorities = set(session.scalars(select(Job.priority).where(Job.owner == SUMMARY_OWNER)))
    engine.dispose()
    assert len(summaries) == 3
    assert all(s.status == "done" and (s.text or "").strip() for s in summaries)
    assert all(s.output_tokens > 0 and s.prompt_tokens > 0 for s in summaries)
    assert jobs == 2 + shapes["long"] + 1  # one each, then the long one's map and reduce
    assert priorities == {"batch"}
