"""The gate's pieces around the statistics: running cases, the report, storing, promoting."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from sqlalchemy import event
from sqlalchemy.exc import OperationalError
from sqlalchemy.orm import Session, sessionmaker

from producer.quality import Case
from producer.quality.blocks import worker_environment
from producer.quality.gate import promote, serving, store_run
from producer.quality.report import build_report, render_report
from producer.quality.runner import CaseAnswer, VariantRun, case_request, run_cases
from schemas.db import engine_of, make_engine, make_sessions
from schemas.errors import ConfigError, DatabaseUnavailable, JobFailed
from schemas.queues import Tier
from schemas.settings import Settings
from schemas.tables import metadata
from workers.variants import served_config

VARIANT = Tier("small@bf16")


def cases(count: int) -> list[Case]:
    return [
        Case(id=f"c{i}", prompt=f"What is {i} + 1?", rule="exact", expected=str(i + 1))
        for i in range(count)
    ]


class FakeHandle:
    def __init__(self, answer: str | None) -> None:
        self.answer = answer

    def result(self, *, timeout: float | None = None) -> Any:
        if self.answer is None:
            raise JobFailed("the engine died")
        return SimpleNamespace(
            text=self.answer,
            timings=SimpleNamespace(ttft_ms=50.0, total_ms=120.0),
            usage=SimpleNamespace(completion_tokens=len(self.answer)),
        )


class FakeClient:
    def __init__(self, answers: dict[str, str | None]) -> None:
        self.answers = answers
        self.submitted: list[dict[str, Any]] = []

    def submit(self, request: dict[str, Any], **options: Any) -> FakeHandle:
        self.submitted.append({"request": request, **options})
        return FakeHandle(self.answers[request["messages"][0]["content"]])


def test_run_cases_submits_each_case_greedy_and_keeps_failures() -> None:
    chosen = cases(5)
    answers: dict[str, str | None] = {c.prompt or "": c.expected for c in chosen}
    answers[chosen[2].prompt or ""] = None
    client = FakeClient(answers)
    seen: list[CaseAnswer] = []
    run = run_cases(client, VARIANT, chosen, max_tokens=4, concurrency=2, on_answer=seen.append)  # type: ignore[arg-type]
    assert [a.case_id for a in seen] == ["c0", "c1", "c2", "c3", "c4"]
    assert not run.answers["c2"].ok and run.answers["c2"].error == "the engine died"
    first = client.submitted[0]
    assert first["tier"] == "small@bf16" and first["priority"] == "interactive"
    assert first["request"]["max_tokens"] == 4 and first["request"]["temperature"] == 0.0


def test_case_budget() -> None:
    case = Case(id="x", prompt="p", rule="exact", expected="1", max_tokens=8)
    assert case_request(case, max_tokens=None)["max_tokens"] == 8
    assert case_request(case, max_tokens=3)["max_tokens"] == 3


def make_run(tier: Tier, chosen: list[Case], right: int) -> VariantRun:
    run = VariantRun(tier=tier, wall_s=2.0)
    for index, case in enumerate(chosen):
        text = str(case.expected) if index < right else "no idea"
        run.answers[case.id] = CaseAnswer(
            case.id, text, ok=True, ttft_ms=40.0 + index, total_ms=90.0, completion_tokens=3
        )
    return run


def test_report_of_a_clearly_worse_variant() -> None:
    chosen = cases(30)
    report = build_report(
        chosen,
        make_run(Tier.SMALL, chosen, 30),
        make_run(VARIANT, chosen, 5),
        source="test",
        threshold_points=3,
    )
    assert report.gate.verdict == "fail"
    assert report.a.quality.value == 1.0 and report.b.quality.value == pytest.approx(5 / 30)
    assert report.gate.flips.a_only == 25 and len(report.lost) == 10
    assert report.a.tok_s == 45.0 and report.a.mean_output_tokens == 3.0
    assert report.a.ttft_ms_p50 is not None
    text = render_report(report)
    assert "verdict: FAIL" in text and "small@bf16" in text
    json.dumps(report.model_dump(mode="json"))


@pytest.fixture
def sessions(tmp_path: Path) -> sessionmaker[Session]:
    engine = make_engine(f"sqlite:///{tmp_path / 'gate.db'}")
    metadata.create_all(engine)
    return make_sessions(engine)


@pytest.fixture
def settings(monkeypatch: pytest.MonkeyPatch) -> Settings:
    monkeypatch.setenv("LLMQ_TIERS", json.dumps({"small@bf16": {"dtype": "bfloat16"}}))
    monkeypatch.delenv("LLMQ_TIERS_FILE", raising=False)
    return Settings.from_env()


def stored(sessions: sessionmaker[Session], right_b: int) -> str:
    chosen = cases(200)
    report = build_report(
        chosen,
        make_run(Tier.SMALL, chosen, 150),
        make_run(VARIANT, chosen, right_b),
        source="test",
        threshold_points=3,
    )
    return store_run(sessions, report)


def test_promotion_needs_a_passing_gate(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    with pytest.raises(ConfigError, match="has no gate run"):
        promote(settings, sessions, VARIANT)
    stored(sessions, right_b=20)  # fails
    with pytest.raises(ConfigError, match="last gate against small was fail"):
        promote(settings, sessions, VARIANT)
    with pytest.raises(ConfigError, match="--force needs --reason"):
        promote(settings, sessions, VARIANT, force=True)
    assert serving(sessions, Tier.SMALL) is None
    assert served_config(settings, Tier.SMALL, sessions).config.dtype == "auto"


def test_a_promoted_variant_is_what_the_tier_serves(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    run_id = stored(sessions, right_b=150)  # identical: passes at n=200
    done = promote(settings, sessions, VARIANT, promoted_by="ops")
    assert done.ab_run_id == run_id and done.verdict == "pass" and not done.forced
    row = serving(sessions, Tier.SMALL)
    assert row is not None and row.variant == "small@bf16" and row.promoted_by == "ops"
    served = served_config(settings, Tier.SMALL, sessions)
    assert served.promoted and served.name == VARIANT and served.config.dtype == "bfloat16"
    # The variant's own workers are unaffected; naming the base tier undoes it.
    assert not served_config(settings, VARIANT, sessions).promoted
    promote(settings, sessions, Tier.SMALL)
    assert not served_config(settings, Tier.SMALL, sessions).promoted


def test_a_forced_promotion_is_recorded(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    promote(settings, sessions, VARIANT, force=True, reason="latency incident")
    row = serving(sessions, Tier.SMALL)
    assert row is not None and row.forced and row.reason == "latency incident"


def test_an_unconfigured_variant_cannot_be_promoted(
    settings: Settings, sessions: sessionmaker[Session]
) -> None:
    with pytest.raises(ConfigError, match="no variant small@nope"):
        promote(settings, sessions, Tier("small@nope"), force=True, reason="x")


def test_a_worker_reads_its_tier_through_a_database_blip(
    settings: Settings, sessions: sessionmaker[Session], monkeypatch: pytest.MonkeyPatch
) -> None:
    promote(settings, sessions, VARIANT, force=True, reason="blip test")
    monkeypatch.setattr("workers.variants.PROMOTIONS_RETRY_DELAYS_S", (0.0, 0.0))
    failures = iter([True, True])

    def refuse_twice(*_args: Any) -> None:
        if next(failures, False):
            raise OperationalError("SELECT", {}, Exception("database is locked"))

    event.listen(engine_of(sessions), "before_cursor_execute", refuse_twice)
    assert served_config(settings, Tier.SMALL, sessions).name == VARIANT
    failures = iter([True, True, True])
    with pytest.raises(DatabaseUnavailable):
        served_config(settings, Tier.SMALL, sessions)


def test_a_blocks_worker_gets_the_tier_table_and_skips_prefilling_prompts() -> None:
    """Cases carry their own messages and name no registered prompt: the worker a block
    starts does not spend its start prefilling the tier's prompts."""
    settings = Settings(tiers={"small": {}, "small@same": {"dtype": "float32"}})
    env = worker_environment(settings)
    assert env["LLMQ_PREFILL_PROMPTS"] == "0"
    assert json.loads(env["LLMQ_TIERS"])["small@same"]["dtype"] == "float32"
    request = case_request(cases(1)[0], max_tokens=8)
    assert "system_prompt" not in request
