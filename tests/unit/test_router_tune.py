"""``llmq router tune``: the threshold from the measured frontier, into the artifact."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from producer.cli import main
from producer.router.artifact import current_artifact_path, load_artifact, save_artifact
from producer.router.frontier import compute_frontier
from producer.router.route import Router, policy_for
from producer.router.tuning import read_frontier_file, tune_router, tuned_threshold
from schemas.errors import ConfigError
from schemas.settings import Settings
from tests.unit.test_router_frontier import perfect_router_case
from tests.unit.test_router_policy import tiny_artifact


@pytest.fixture
def folder(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.delenv("LLMQ_ROUTER_LARGE_THRESHOLD", raising=False)
    monkeypatch.setenv("LLMQ_ROUTER_DIR", str(tmp_path))
    save_artifact(tiny_artifact(), tmp_path)
    return tmp_path


def bench_output(router: str | None) -> dict[str, object]:
    small, large, scores = perfect_router_case()
    frontier = compute_frontier(small, large, scores, router=router)
    return {"bench": "routing", "apgr": frontier.apgr, "frontier": frontier.model_dump()}


def test_tune_writes_the_cheapest_qualifying_threshold_and_the_router_serves_it(
    folder: Path,
) -> None:
    before = current_artifact_path(folder)
    assert before is not None
    data = bench_output(load_artifact(before).model_hash)
    written, point, score = tune_router(folder, data, max_quality_drop_points=3)
    assert score == "difficulty"
    assert point.large_share == 0.25 and 0.1 < point.threshold < 0.9
    assert current_artifact_path(folder) == written != before
    tuned = load_artifact(written)
    assert tuned_threshold(tuned.metadata) == point.threshold
    assert tuned.metadata["tuned"]["cases"] == 200
    assert tuned.metadata["data_hash"] == "x"  # the rest of the metadata is kept
    assert tuned.model_hash == load_artifact(before).model_hash
    router = Router(Settings(router_dir=folder))
    assert router.policy.large_threshold == point.threshold
    assert router.threshold_source == "tuned"
    assert router.policy.large_by_score_only
    # Tuning again from the same frontier gives the same artifact.
    again, _, _ = tune_router(folder, data, max_quality_drop_points=3)
    assert again == written


def test_a_set_threshold_overrides_the_tuned_one(folder: Path) -> None:
    path = current_artifact_path(folder)
    assert path is not None
    tune_router(folder, bench_output(None), max_quality_drop_points=3)
    router = Router(Settings(router_dir=folder))
    policy, source = policy_for(Settings(router_large_threshold=0.5), router.classifier)
    assert (policy.large_threshold, source) == (0.5, "setting")
    untuned = Router(Settings(router_dir=folder / "none"))
    assert untuned.threshold_source == "default"
    assert untuned.policy.large_threshold == 0.35


def test_a_frontier_of_another_router_is_refused(folder: Path) -> None:
    with pytest.raises(ConfigError, match="measured with router other"):
        tune_router(folder, bench_output("other"), max_quality_drop_points=3)


def test_tune_without_a_trained_router_says_so(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="no router is trained"):
        tune_router(tmp_path, bench_output(None), max_quality_drop_points=3)


def test_the_frontier_file_may_be_a_saved_bench_output(tmp_path: Path) -> None:
    saved = tmp_path / "bench.txt"
    saved.write_text("apgr: 0.9\n" + json.dumps(bench_output(None)) + "\n")
    assert read_frontier_file(saved)["bench"] == "routing"
    with pytest.raises(ConfigError, match="cannot read the frontier"):
        read_frontier_file(tmp_path / "missing.json")
    (tmp_path / "empty.json").write_text("nothing here\n")
    with pytest.raises(ConfigError, match="holds no JSON object"):
        read_frontier_file(tmp_path / "empty.json")


def test_the_commands_tune_and_then_route_with_score_and_threshold(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = current_artifact_path(folder)
    assert path is not None
    (folder / "frontier.json").write_text(json.dumps(bench_output(load_artifact(path).model_hash)))
    assert main(["router", "tune", "--max-quality-drop", "3", "--json"]) == 0
    tuned = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert tuned["large_share"] == 0.25 and tuned["quality_drop_upper_points"] <= 3
    assert main(["route", "status status"]) == 0
    routed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert routed["tier"] == "large"
    assert routed["score"] > tuned["threshold"]
    assert (routed["threshold"], routed["threshold_source"]) == (tuned["threshold"], "tuned")
    assert main(["router", "tune", "--max-quality-drop", "0"]) == 1
    assert "too few" in capsys.readouterr().err


def test_a_tuned_policy_sends_large_by_the_score_alone() -> None:
    from producer.router.classifier import Prediction
    from producer.router.policy import PolicyConfig, apply_policy
    from schemas.queues import Tier

    def predict(small: float, medium: float, large: float) -> Prediction:
        probs = {"small": small, "medium": medium, "large": large}
        best = max(probs, key=probs.__getitem__)
        return Prediction(Tier(best), probs[best], probs)

    tuned = PolicyConfig(large_threshold=0.6, large_by_score_only=True)
    # An argmax of large under the threshold is not large; a low-confidence medium
    # stays medium (the default policy would send both large).
    assert apply_policy(predict(0.1, 0.35, 0.55), tuned).tier is Tier.MEDIUM
    assert apply_policy(predict(0.3, 0.45, 0.25), tuned).tier is Tier.MEDIUM
    assert apply_policy(predict(0.1, 0.35, 0.55), PolicyConfig()).tier is Tier.LARGE
    assert apply_policy(predict(0.3, 0.45, 0.25), PolicyConfig()).tier is Tier.LARGE
    decision = apply_policy(predict(0.2, 0.15, 0.65), tuned)
    assert decision.tier is Tier.LARGE and "tuned threshold 0.6" in decision.reason
    # A small that is unsure goes medium, never past it.
    assert apply_policy(predict(0.45, 0.4, 0.15), tuned).tier is Tier.MEDIUM
    assert apply_policy(predict(0.8, 0.1, 0.1), tuned).tier is Tier.SMALL


def outcome_output(router: str | None) -> dict[str, object]:
    """A bench output whose difficulty scores are backwards (the hard cases lowest) and
    whose outcome head's are right; the head routes "order" large and "status" not."""
    small, large, scores = perfect_router_case()
    backwards = {case: 1 - score for case, score in scores.items()}
    difficulty = compute_frontier(small, large, backwards, router=router)
    outcome = compute_frontier(small, large, scores, router=router)
    head = {"weights": [0.0, 10.0, -10.0], "bias": 0.0, "mean": [0.0] * 3, "scale": [1.0] * 3}
    return {
        "bench": "routing",
        "frontier": difficulty.model_dump(),
        "outcome_routers": {"learned_cv": {"frontier": outcome.model_dump(), "head": head}},
    }


def test_tune_routes_by_the_outcome_head_where_it_sends_fewer_requests_large(
    folder: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = current_artifact_path(folder)
    assert path is not None
    data = outcome_output(load_artifact(path).model_hash)
    written, point, score = tune_router(folder, data, max_quality_drop_points=3)
    assert (score, point.large_share) == ("outcome", 0.25)
    tuned = load_artifact(written)
    assert tuned.metadata["outcome_head"]["weights"] == [0.0, 10.0, -10.0]
    assert tuned.metadata["tuned"]["score"] == "outcome"
    assert Router(Settings(router_dir=folder)).policy.score == "outcome"
    # By difficulty "status" is large and "order" medium; the head says the reverse.
    assert main(["route", "order order"]) == 0
    routed = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert (routed["tier"], routed["score_kind"]) == ("large", "outcome")
    assert routed["score"] > routed["threshold"]
    assert "p(large answers better)" in routed["reason"]
    assert main(["route", "status status"]) == 0
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["tier"] != "large"
    # Asked for difficulty, the head is dropped and p(large) decides again.
    written, point, score = tune_router(folder, data, max_quality_drop_points=3, score="difficulty")
    assert score == "difficulty" and point.large_share > 0.25
    assert "outcome_head" not in load_artifact(written).metadata
    assert Router(Settings(router_dir=folder)).policy.score == "difficulty"


def test_tuning_on_an_outcome_head_the_bench_did_not_measure_is_refused(folder: Path) -> None:
    with pytest.raises(ConfigError, match="holds no outcome router"):
        tune_router(folder, bench_output(None), max_quality_drop_points=3, score="outcome")
