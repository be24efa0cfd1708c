"""``llmq bench routing``'s frontier, evaluated from stored answers (no engine starts)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import bench.routing
from bench.routing import (
    decision_scores,
    frontier_cases,
    frontier_summary,
    measure_frontier,
    stored_pass,
)
from producer.quality.cases import Case
from producer.quality.runner import CaseAnswer
from producer.router.classifier import Prediction
from producer.router.frontier import compute_frontier, tier_pass_from_json
from producer.router.tuning import FRONTIER_FILE, read_frontier_file
from schemas.queues import Tier
from schemas.settings import Settings
from tests.unit.test_router_frontier import perfect_router_case


class FakeClassifier:
    """p(large) grows with the text's length: long cases score high."""

    model_hash = "fake-router"

    def predict(self, text: str) -> Prediction:
        large = min(len(text) / 400, 1.0)
        probs = {"small": 1 - large, "medium": 0.0, "large": large}
        return Prediction(Tier.SMALL if large < 0.5 else Tier.LARGE, max(large, 1 - large), probs)

    def features(self, texts: list[str]) -> np.ndarray:
        """Two features of each text: its length and its count of digits."""
        return np.array([[len(t), sum(c.isdigit() for c in t)] for t in texts], np.float32)


def test_frontier_cases_spread_over_the_pool_and_reach_past_it() -> None:
    assert len(frontier_cases(300)) == 300
    assert len({case.id for case in frontier_cases(344)}) == 344
    assert len(frontier_cases(400)) == 400


def test_a_stored_pass_scores_answers_and_splits_the_block_time() -> None:
    cases = [
        Case(id="a", prompt="2+2?", rule="exact", expected="4"),
        Case(id="b", prompt="3+3?", rule="exact", expected="6"),
        Case(id="c", prompt="1+1?", rule="exact", expected="2"),
    ]
    answers = {
        "a": CaseAnswer("a", "4", ok=True, ttft_ms=5, total_ms=100.0, completion_tokens=1),
        "b": CaseAnswer("b", "7", ok=True, ttft_ms=5, total_ms=300.0, completion_tokens=1),
        "c": CaseAnswer("c", "", ok=False, error="lost"),
    }
    stored = stored_pass(Tier.SMALL, cases, answers, model="m", wall_s=6.0, max_tokens=0)
    rows = {row["case_id"]: row for row in stored["answers"]}
    assert [rows[c]["score"] for c in "abc"] == [1.0, 0.0, 0.0]
    assert [rows[c]["engine_s"] for c in "abc"] == [1.0, 3.0, 2.0]
    assert rows["c"]["total_ms"] is None and rows["c"]["error"] == "lost"
    assert stored["max_tokens"] is None and stored["wall_s"] == 6.0
    found = tier_pass_from_json(json.loads(json.dumps(stored)))
    assert found.answers["a"].score == 1.0


def test_the_summary_names_the_issue_keys_at_the_tuned_point() -> None:
    small, large, scores = perfect_router_case()
    summary = frontier_summary(compute_frontier(small, large, scores), max_quality_drop=3)
    for key in ("apgr", "large_share_for_80pct", "large_share_for_95pct", "random_apgr"):
        assert isinstance(summary[key], float)
    assert summary["large_share"] == 0.25
    assert summary["quality_drop_points"] == 0.0
    assert summary["latency_ratio_vs_all_large"] < 0.6
    assert summary["measured_quality_routed"] == summary["measured_quality_all_large"] == 1.0
    assert summary["frontier"]["points"][0]["large_share"] == 0.0


def test_too_few_cases_for_the_bound_still_give_the_curve() -> None:
    small, large, scores = perfect_router_case()
    summary = frontier_summary(compute_frontier(small, large, scores), max_quality_drop=0)
    assert "too few" in summary["tuned_error"]
    assert "large_share" not in summary and summary["apgr"] is not None


def write_pass(folder: Path, tier: Tier, cases: list[Case], right: set[str], ms: float) -> None:
    answers = [
        {"case_id": c.id, "score": float(c.id in right), "total_ms": ms, "engine_s": ms / 4000}
        for c in cases
    ]
    data = {"tier": tier.value, "answers": answers}
    (folder / f"answers-{tier.value}.json").write_text(json.dumps(data))


def test_stored_answers_are_evaluated_again_without_an_engine(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    cases = frontier_cases(300)
    classifier = FakeClassifier()
    scores = decision_scores(classifier, cases)  # type: ignore[arg-type]
    hard = {case for case, score in scores.items() if score >= 0.3}
    answers = tmp_path / "answers"
    answers.mkdir()
    write_pass(answers, Tier.SMALL, cases, {c.id for c in cases} - hard, ms=200.0)
    write_pass(answers, Tier.LARGE, cases, {c.id for c in cases}, ms=1000.0)

    def no_engines(*args: object, **kwargs: object) -> None:
        raise AssertionError("the stored answers cover every case: no engine may start")

    monkeypatch.setattr("bench.harness.bench_database", no_engines)
    settings = Settings(router_dir=tmp_path)
    result = measure_frontier(
        settings,
        classifier,  # type: ignore[arg-type]
        cases=300,
        max_tokens=0,
        max_quality_drop=3,
        answers_dir=answers,
        reuse_answers=True,
    )
    assert result["scored_cases"] == 300
    assert result["frontier"]["router"] == "fake-router"
    assert result["large_share"] == pytest.approx(len(hard) / 300, abs=0.01)
    assert result["quality_drop_upper_points"] <= 3
    assert result["latency_ratio_vs_all_large"] < 1
    stored = read_frontier_file(tmp_path / FRONTIER_FILE)
    assert stored["apgr"] == result["apgr"]
    assert bench.routing.FRONTIER_TIERS == (Tier.SMALL, Tier.LARGE)
