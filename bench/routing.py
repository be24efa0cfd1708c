"""``llmq bench routing``: the cost-quality frontier of auto routing, and a simulated mix.

The frontier (``--measured-cases``, on this host's real tiers): every case is answered
once on ``small`` and once on ``large``, one engine at a time, and the answers (text,
score, latency, engine time) are stored as JSON; the router's decision score of each
case (p(large)) is then swept offline from all-small to all-large
(:mod:`producer.router.frontier`), so the whole curve costs two passes. The result
names APGR, the large share needed for 80% and 95% of the quality gap, a random
router's figures, and the operating point ``llmq router tune`` would pick (the
cheapest share of large calls within ``--max-quality-drop`` points of all-large by the
interval's bound). The frontier is written to ``frontier.json`` in the router's
folder, where ``llmq router tune`` reads it; ``--reuse-answers 1`` evaluates the
stored answers again (after retraining, say) without starting an engine.

Each simulated request is a dataset text of the drawn tier (60% small, 25% medium,
15% large by default) and asks for the same number of output tokens, so the two
sides differ only in where requests go. It is served at its routed tier's latency
(TTFT + TPOT x tokens); the baseline sends every request to the large tier.
Under-routed requests (a large request sent lower) are counted too: that is where
routing costs quality.
"""

from __future__ import annotations

import json
import random
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np

from bench.harness import counted, step
from bench.routing_outcomes import outcome_routers
from producer.quality.cases import BENCH_POOL, Case, load_bench_pool, load_cases
from producer.router.classifier import DifficultyClassifier
from producer.router.dataset import load_examples
from producer.router.frontier import (
    Frontier,
    TierPass,
    compute_frontier,
    engine_shares,
    pick_operating_point,
    tier_pass_from_json,
)
from producer.router.policy import TIER_ORDER, PolicyConfig, apply_policy
from schemas.percentiles import median
from schemas.queues import Tier
from schemas.settings import Settings
from workers.engine.base import EngineRequest, SamplingOptions
from workers.engine.vllm import VllmEngine
from workers.models import resolve_model

OUTPUT_TOKENS = 200
# SmolLM2 sizes, for scaling the measured small tier to the medium and large tiers here.
LOCAL_SCALE = {Tier.SMALL: 1.0, Tier.MEDIUM: 360 / 135, Tier.LARGE: 1700 / 135}


def simulate(
    classifier: DifficultyClassifier,
    policy: PolicyConfig,
    profile: dict[str, Any],
    *,
    mix: dict[Tier, float],
    requests: int,
    seed: int,
    output_tokens: int = OUTPUT_TOKENS,
) -> dict[str, Any]:
    """Mean latency routed vs all-large, relative cost and under-routing, for one profile."""
    rng = random.Random(seed)
    by_tier = {tier: [e.text for e in load_examples() if e.tier is tier] for tier in Tier}
    tiers = profile["tiers"]
    routed_ms, large_ms, routed_cost, large_cost, under = [], [], 0.0, 0.0, 0
    bar = counted(f"simulating on the {profile['name']} profile", requests)
    with bar:
        for _ in range(requests):
            true_tier = rng.choices(list(mix), weights=list(mix.values()))[0]
            text = rng.choice(by_tier[true_tier])
            routed = apply_policy(classifier.predict(text), policy).tier
            tokens = output_tokens
            routed_ms.append(_latency(tiers[routed.value], tokens))
            large_ms.append(_latency(tiers["large"], tokens))
            routed_cost += tokens * tiers[routed.value]["cost_per_1k_output_tokens"] / 1000
            large_cost += tokens * tiers["large"]["cost_per_1k_output_tokens"] / 1000
            under += TIER_ORDER.index(routed) < TIER_ORDER.index(true_tier)
            bar.advance()
    routed_mean, large_mean = statistics.mean(routed_ms), statistics.mean(large_ms)
    return {
        "profile": profile["name"],
        "routed_mean_ms": round(routed_mean, 1),
        "all_large_mean_ms": round(large_mean, 1),
        "ratio": round(routed_mean / large_mean, 3),
        "relative_cost": round(routed_cost / large_cost, 3),
        "under_routed_share": round(under / requests, 4),
    }


def _latency(tier: dict[str, Any], tokens: int) -> float:
    return float(tier["ttft_ms"]) + float(tier["tpot_ms"]) * tokens


def measure_local_profile(settings: Settings) -> dict[str, Any]:
    """TTFT and TPOT of the bundled model on this machine (the small tier), measured now.

    This machine has one model, so medium and large are the small tier's figures scaled
    by the parameter counts of SmolLM2-360M and -1.7B; the profile says so.
    """
    config = settings.tier(Tier.SMALL)
    path = resolve_model(config.model, settings.bundled_model_dir)
    with step("local profile: starting the small engine"):
        engine = VllmEngine.start(model_path=path, config=config)
    try:
        prompt = engine.render_chat([{"role": "user", "content": "Explain what a queue is."}])
        ttfts, tpots = [], []
        timing = counted("local profile: timing answers (1 warm-up)", 6)
        for index in timing.track(range(6)):
            started = time.perf_counter()
            first = last = None
            tokens = 0
            options = SamplingOptions(max_tokens=48, temperature=0.0)
            for delta in engine.stream(EngineRequest(prompt, options, f"profile-{index}")):
                now = time.perf_counter()
                first = first or now
                last, tokens = now, delta.completion_tokens
            if index and first and last and tokens > 1:
                ttfts.append((first - started) * 1000)
                tpots.append((last - first) * 1000 / (tokens - 1))
    finally:
        engine.shutdown()
    ttft, tpot = median(ttfts), median(tpots)
    return {
        "name": "cpu-local",
        "description": "Measured on this machine with the bundled SmolLM2-135M (small); "
        "medium and large scaled by SmolLM2-360M and -1.7B parameter counts.",
        "tiers": {
            tier.value: {
                "ttft_ms": round(ttft * scale, 1),
                "tpot_ms": round(tpot * scale, 2),
                "cost_per_1k_output_tokens": scale,
                "sources": ["measured by llmq bench routing" if tier is Tier.SMALL else "scaled"],
            }
            for tier, scale in LOCAL_SCALE.items()
        },
    }


def run_routing(
    settings: Settings,
    classifier: DifficultyClassifier,
    policy: PolicyConfig,
    *,
    profile_path: Path,
    mix: dict[Tier, float],
    requests: int,
    seed: int,
    output_tokens: int = OUTPUT_TOKENS,
    measured_cases: int = 0,
    measured_max_tokens: int = 0,
    local_profile: int = 1,
    max_quality_drop: float = 3.0,
    answers_dir: Path | None = None,
    reuse_answers: int = 0,
) -> dict[str, Any]:
    """Simulate on the local measured profile (unless ``local_profile`` is 0: it starts
    the small engine) and on the given GPU profile; with ``measured_cases``, also
    measure the frontier on the real small and large tiers of this host (see the module
    docstring)."""
    gpu_profile = json.loads(profile_path.read_text())
    profiles = [measure_local_profile(settings), gpu_profile] if local_profile else [gpu_profile]
    results = [
        simulate(
            classifier,
            policy,
            profile,
            mix=mix,
            requests=requests,
            seed=seed,
            output_tokens=output_tokens,
        )
        for profile in profiles
    ]
    gpu = results[-1]
    measured: dict[str, Any] = {}
    if measured_cases:
        measured = measure_frontier(
            settings,
            classifier,
            cases=measured_cases,
            max_tokens=measured_max_tokens,
            max_quality_drop=max_quality_drop,
            answers_dir=answers_dir or settings.router_folder / "frontier",
            reuse_answers=bool(reuse_answers),
        )
    return {
        "bench": "routing",
        "mix": {tier.value: share for tier, share in mix.items()},
        "requests": requests,
        "output_tokens": output_tokens,
        "routed_mean_ms": gpu["routed_mean_ms"],
        "all_large_mean_ms": gpu["all_large_mean_ms"],
        "ratio": gpu["ratio"],
        "relative_cost": gpu["relative_cost"],
        "profiles": results,
        "local_profile": profiles[0]["tiers"] if local_profile else None,
        "sources": {
            "routed_mean_ms": "simulated (GPU profile)",
            "measured_routed_mean_ms": "measured on this host (the tuned operating point)"
            if measured_cases
            else "skipped",
        },
        **measured,
    }


FRONTIER_TIERS = (Tier.SMALL, Tier.LARGE)


def frontier_cases(count: int) -> list[Case]:
    """``count`` shipped cases, spread evenly over the bench pool (over the whole file
    when more are asked for than the pool holds)."""
    shipped = load_bench_pool() if count <= BENCH_POOL else load_cases()
    return shipped[:: max(1, len(shipped) // count)][:count]


def request_text(case: Case) -> str:
    """What the router reads of a case: its latest user turn."""
    return str(next(m["content"] for m in reversed(case.chat()) if m.get("role") == "user"))


def decision_scores(classifier: DifficultyClassifier, cases: list[Case]) -> dict[str, float]:
    """The router's decision score of each case: p(large) of its latest user turn."""
    return {
        case.id: classifier.predict(request_text(case)).probabilities[Tier.LARGE.value]
        for case in cases
    }


def stored_pass(
    tier: Tier, cases: list[Case], answers: Any, *, model: str, wall_s: float, max_tokens: int
) -> dict[str, Any]:
    """One tier's answers as stored: each scored by its case's rule, with its latency
    and its share of the block's engine time (a failed job scores 0)."""
    from producer.quality.scoring import score

    ordered = [answers[case.id] for case in cases]
    shares = engine_shares(wall_s, [a.total_ms if a.ok else None for a in ordered])
    rows = []
    for case, answer, engine_s in zip(cases, ordered, shares, strict=True):
        value = float(score(case, answer.text)) if answer.ok else 0.0
        rows.append(
            {
                "case_id": case.id,
                "text": answer.text,
                "ok": answer.ok,
                "error": answer.error,
                "ttft_ms": answer.ttft_ms,
                "total_ms": answer.total_ms if answer.ok else None,
                "completion_tokens": answer.completion_tokens,
                "score": value,
                "engine_s": round(engine_s, 4),
            }
        )
    return {
        "tier": tier.value,
        "model": model,
        "wall_s": round(wall_s, 3),
        "max_tokens": max_tokens or None,
        "cases": len(cases),
        "answers": rows,
    }


def _stored(path: Path, cases: list[Case]) -> dict[str, Any] | None:
    """A stored pass at ``path`` that answers every one of ``cases``, else None."""
    if not path.is_file():
        return None
    data: dict[str, Any] = json.loads(path.read_text())
    have = {row.get("case_id") for row in data.get("answers", [])}
    return data if have >= {case.id for case in cases} else None


def answer_tiers(
    settings: Settings,
    cases: list[Case],
    *,
    max_tokens: int,
    answers_dir: Path,
    reuse_answers: bool,
    concurrency: int = 4,
) -> dict[Tier, TierPass]:
    """Every case answered on small, then on large (one worker and engine at a time),
    stored as ``answers-<tier>.json`` in ``answers_dir``; with ``reuse_answers``, a
    stored pass that covers the cases is read instead of run."""
    from bench.harness import answer_cases, bench_database
    from producer.client import Client

    answers_dir.mkdir(parents=True, exist_ok=True)
    found = {
        tier: _stored(answers_dir / f"answers-{tier.value}.json", cases) if reuse_answers else None
        for tier in FRONTIER_TIERS
    }
    missing = [tier for tier in FRONTIER_TIERS if found[tier] is None]
    if missing:
        # The tiers' workers record their jobs: in a scratch database, not the host's.
        with bench_database(settings) as scratch, Client(scratch) as client:
            for tier in missing:
                run = answer_cases(
                    scratch,
                    client,
                    tier,
                    cases,
                    what=f"frontier, {tier} tier",
                    max_tokens=max_tokens or None,
                    concurrency=concurrency,
                )
                model = settings.tier(tier).model
                stored = stored_pass(
                    tier, cases, run.answers, model=model, wall_s=run.wall_s, max_tokens=max_tokens
                )
                path = answers_dir / f"answers-{tier.value}.json"
                path.write_text(json.dumps(stored, indent=1) + "\n")
                found[tier] = stored
    wanted = {case.id for case in cases}
    passes = {}
    for tier, data in found.items():
        assert data is not None
        rows = [row for row in data["answers"] if row["case_id"] in wanted]
        passes[tier] = tier_pass_from_json({**data, "answers": rows})
    return passes


def measure_frontier(
    settings: Settings,
    classifier: DifficultyClassifier,
    *,
    cases: int,
    max_tokens: int,
    max_quality_drop: float,
    answers_dir: Path,
    reuse_answers: bool,
) -> dict[str, Any]:
    """The frontier's figures, written to ``frontier.json`` in the router's folder."""
    from producer.router.tuning import FRONTIER_FILE

    chosen = frontier_cases(cases)
    passes = answer_tiers(
        settings,
        chosen,
        max_tokens=max_tokens,
        answers_dir=answers_dir,
        reuse_answers=reuse_answers,
    )
    scores = decision_scores(classifier, chosen)
    with step(f"the frontier over {len(chosen)} cases"):
        frontier = compute_frontier(
            passes[Tier.SMALL], passes[Tier.LARGE], scores, router=classifier.model_hash
        )
    result = frontier_summary(frontier, max_quality_drop=max_quality_drop)
    with step("routers on the measured outcomes (oracle, learned with cross-validation)"):
        result["outcome_routers"] = outcome_routers(
            passes[Tier.SMALL],
            passes[Tier.LARGE],
            classifier.features([request_text(case) for case in chosen]).astype(np.float64),
            [case.id for case in chosen],
            summarise=lambda found: frontier_summary(found, max_quality_drop=max_quality_drop),
            router=classifier.model_hash,
        )
    result["answers_dir"] = _shown(answers_dir)
    result["measured_models"] = {tier.value: settings.tier(tier).model for tier in FRONTIER_TIERS}
    path = settings.router_folder / FRONTIER_FILE
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(result) + "\n")
    result["frontier_file"] = _shown(path)
    return result


def _shown(path: Path) -> str:
    """``path`` as a result records it: under the home folder as ``~/...``, so a
    committed result names no machine's home."""
    try:
        return str(Path("~") / path.resolve().relative_to(Path.home().resolve()))
    except ValueError:
        return str(path)


def frontier_summary(frontier: Frontier, *, max_quality_drop: float) -> dict[str, Any]:
    """The bench's frontier figures: the issue's keys at the top, the sweep under
    ``frontier``, and the old ``measured_*`` keys (the tuned point against all-large)."""
    from schemas.errors import ConfigError

    everything = frontier.points[-1]
    try:
        point = pick_operating_point(frontier, max_quality_drop_points=max_quality_drop)
    except ConfigError as exc:
        # Too few cases to bound the drop: the curve still stands, without a tuned point.
        return {
            **_curve(frontier),
            "max_quality_drop_points": max_quality_drop,
            "tuned_error": str(exc),
            "frontier": frontier.model_dump(mode="json"),
        }
    tuned = next(p for p in frontier.points if p.threshold == point.threshold)
    return {
        **_curve(frontier),
        "max_quality_drop_points": max_quality_drop,
        "tuned_threshold": point.threshold,
        "large_share": round(point.large_share, 4),
        "quality_drop_points": point.quality_drop_points,
        "quality_drop_upper_points": point.quality_drop_upper_points,
        "latency_ratio_vs_all_large": point.latency_ratio_vs_all_large,
        "p95_latency_ratio_vs_all_large": point.p95_latency_ratio_vs_all_large,
        "engine_s_ratio_vs_all_large": point.engine_s_ratio_vs_all_large,
        "measured_cases": frontier.cases,
        "measured_routed_mean_ms": tuned.mean_ms,
        "measured_all_large_mean_ms": everything.mean_ms,
        "measured_ratio": point.latency_ratio_vs_all_large,
        "measured_quality_routed": round(tuned.quality.value, 4),
        "measured_quality_all_large": round(everything.quality.value, 4),
        "frontier": frontier.model_dump(mode="json"),
    }


def _curve(frontier: Frontier) -> dict[str, Any]:
    return {
        "scored_cases": frontier.cases,
        "quality_small": round(frontier.quality_small, 4),
        "quality_large": round(frontier.quality_large, 4),
        "apgr": _round(frontier.apgr),
        "large_share_for_80pct": _round(frontier.large_share_for_80pct),
        "large_share_for_95pct": _round(frontier.large_share_for_95pct),
        "random_apgr": _round(frontier.random.apgr),
        "random_large_share_for_80pct": _round(frontier.random.large_share_for_80pct),
        "random_large_share_for_95pct": _round(frontier.random.large_share_for_95pct),
    }


def _round(value: float | None) -> float | None:
    return None if value is None else round(value, 4)
