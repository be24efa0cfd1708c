"""``llmq bench routing``: what auto routing saves on a mixed workload, by latency profile.

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

from bench.harness import counted, median, step
from producer.router.classifier import DifficultyClassifier
from producer.router.dataset import load_examples
from producer.router.policy import TIER_ORDER, PolicyConfig, apply_policy
from schemas.queues import Tier
from schemas.settings import Settings
from workers.engine.base import SamplingOptions
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
            for delta in engine.stream(prompt, options, f"profile-{index}"):
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
    measured_max_tokens: int = 16,
    local_profile: int = 1,
) -> dict[str, Any]:
    """Simulate on the local measured profile (unless ``local_profile`` is 0: it starts
    the small engine) and on the given GPU profile; with ``measured_cases``, also run
    the real tiers of this host (``measured_*`` figures)."""
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
        from bench.harness import bench_database
        from bench.real_tiers import measure_real_tiers

        # The tiers' workers record their jobs: in a scratch database, not the host's.
        with bench_database(settings) as scratch:
            measured = measure_real_tiers(
                scratch, classifier, policy, cases=measured_cases, max_tokens=measured_max_tokens
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
            "measured_routed_mean_ms": "measured on this host" if measured_cases else "skipped",
        },
        **measured,
    }
