"""The A/B gate with real workers: identical variants pass, a truncated one fails.

Runs its own Redis database and PostgreSQL database (not the session worker's), and
starts one worker at a time, the way ``llmq ab`` does on a small host: ``small``'s block,
then ``small@same``'s (the same engine settings under a variant name). B answers the
same 20 cases twice: with A's budget (8 tokens) and truncated to 4 tokens.

With 20 cases no verdict at 3 points is honest (no flips in 20 still allows a flip
rate near 16%), so the test gates at 25 points; the identical variant passes it and
the truncated one, which loses most answers, fails it.
"""

from __future__ import annotations

import pytest
import redis

from producer.client import Client
from producer.quality.blocks import worker_block
from producer.quality.cases import Case
from producer.quality.report import build_report
from producer.quality.runner import run_cases
from schemas.queues import Tier
from schemas.settings import Settings
from tests.conftest import REDIS_BASE, postgres_database, truncate_jobs

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(900)]

SAME = Tier("small@same")
# A Redis database of its own: not the session worker's (13) nor an integration slot's.
AB_REDIS_DB = 3
THRESHOLD = 25.0


def opening_hours_cases() -> list[Case]:
    """The model repeats the store's opening hour in about 6-8 tokens ("The store is
    open from 9 am"); 4 tokens stop before the hour."""
    cases = []
    for index in range(20):
        opens, closes = 7 + index % 4, 4 + index % 3
        day = ["Monday to Friday", "Monday to Saturday", "every day", "weekdays"][index // 5]
        cases.append(
            Case(
                id=f"hours-{index:02d}",
                prompt=f"Store information: We are open from {opens} am to {closes} pm, "
                f"{day}.\nCustomer: What time do you open?\n"
                "Answer the customer in one short sentence.",
                rule="regex",
                expected=rf"(?<![\d.]){opens}(?!\d)",
            )
        )
    return cases


@pytest.fixture
def settings() -> Settings:
    redis_url = f"{REDIS_BASE}/{AB_REDIS_DB}"
    redis.Redis.from_url(redis_url).flushdb()
    database_url = postgres_database("llmq_e2e_ab")
    truncate_jobs(database_url)
    # float32: the precision these cases were written against (in bfloat16 the model
    # opens some answers with a pleasantry and reaches the hour only after 8 tokens).
    tiers = {"small": {"dtype": "float32"}, "small@same": {}}
    return Settings(broker_url=redis_url, database_url=database_url, tiers=tiers)


def test_the_gate_passes_an_identical_variant_and_fails_a_truncated_one(
    settings: Settings,
) -> None:
    cases = opening_hours_cases()
    with Client(settings) as client:
        with worker_block(settings, Tier.SMALL):
            run_a = run_cases(client, Tier.SMALL, cases, max_tokens=8, concurrency=1)
        with worker_block(settings, SAME):
            run_b = run_cases(client, SAME, cases, max_tokens=8, concurrency=1)
            run_short = run_cases(client, SAME, cases, max_tokens=4, concurrency=1)
    assert all(answer.ok for run in (run_a, run_b, run_short) for answer in run.answers.values())
    same = build_report(cases, run_a, run_b, source="e2e", threshold_points=THRESHOLD)
    short = build_report(cases, run_a, run_short, source="e2e", threshold_points=THRESHOLD)
    detail = [(c.id, run_a.answers[c.id].text, run_short.answers[c.id].text) for c in cases]
    assert same.a.quality.value >= 0.5, detail  # the model can answer these at 8 tokens
    assert same.gate.verdict == "pass", same.gate
    assert same.gate.flips.a_only + same.gate.flips.b_only <= 1
    assert short.gate.verdict == "fail", (short.gate, detail)
    assert short.b.mean_output_tokens <= 4 < short.a.mean_output_tokens
