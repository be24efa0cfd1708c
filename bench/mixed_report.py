"""What ``llmq bench mixed`` reports: every side's figures pooled over its blocks, the
quality of its scored answers, llmq's goodput ratio to each vLLM baseline, and the
host, engine precision and commit the run stood on.
"""

from __future__ import annotations

import contextlib
import os
import platform
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.goodput import (
    Outcome,
    SideFigures,
    Slo,
    quality_percent,
    ratio_interval,
    side_figures,
    side_keys,
    window_tokens,
)
from bench.harness import rounded
from bench.mixed_sides import (
    Side,
)
from bench.trace import Event, TracePlan, describe
from schemas.settings import Settings, TierConfig

COST_MEASURE = (
    "engine-seconds: seconds with at least one request of the side in flight (seen "
    "from the client), times the serving tier's cost_weight"
)


@dataclass
class SideRun:
    """One side's replay and what happened around it."""

    outcomes: list[Outcome]
    restart_s: float | None = None
    restart_at_s: float | None = None
    restart_error: str | None = None
    cpu_s_by_process: dict[str, float] = field(default_factory=dict)
    """CPU-seconds of the side's serving processes during the replay, by process name."""
    share: dict[str, int] = field(default_factory=dict)
    """What the side's own scheduler says of batch's share at the replay's end (llmq's
    worker: ``batch_share_cuts`` and ``batch_under_interactive``); empty for vLLM."""

    @property
    def cpu_s(self) -> float:
        """CPU-seconds of the side's serving processes during the replay."""
        return sum(self.cpu_s_by_process.values())


def score_quality(
    events: Sequence[Event], outcomes: Sequence[Outcome]
) -> tuple[float | None, int, str | None]:
    """Quality in percent on the events with a case, the cases scored, and why not."""
    from producer.quality.cases import load_cases
    from producer.quality.scoring import score
    from schemas.errors import ConfigError

    cases = {case.id: case for case in load_cases()}
    scores: list[bool | float] = []
    try:
        for outcome in outcomes:
            case_id = events[outcome.index].case
            if case_id is None:
                continue
            scores.append(score(cases[case_id], outcome.text) if outcome.ok else False)
    except ConfigError as exc:
        return None, 0, str(exc)
    return quality_percent(scores), len(scores), None


def report(
    settings: Settings,
    plan: TracePlan,
    events: Sequence[Event],
    runs: dict[str, list[SideRun]],
    sides: dict[str, Side],
    *,
    with_restart: bool,
) -> dict[str, Any]:
    """Every side's figures, pooled over its blocks, and llmq's ratios to each vLLM
    baseline (quality scored here, after every engine stopped)."""
    flood_s = plan.duration_s - plan.flood_start_s
    result: dict[str, Any] = {"bench": "mixed"}
    figures: dict[str, SideFigures] = {}
    windows: dict[str, list[float]] = {}
    for name, side_runs in runs.items():
        config = settings.tier(sides[name].tier)
        outcomes = [o for run in side_runs for o in run.outcomes]
        figures[name] = side_figures(
            outcomes,
            flood_s=flood_s * len(side_runs),
            cost_weight=config.cost_weight,
            slo=Slo(config.interactive_ttft_slo_ms, config.interactive_itl_slo_ms),
        )
        result |= side_keys(name, figures[name])
        windows[name] = [
            tokens
            for run in side_runs
            for tokens in window_tokens(
                run.outcomes, flood_start=plan.flood_start_s, flood_s=flood_s
            )
        ]
        result |= _side_details(name, side_runs, outcomes, events)
    result |= _ratios(figures, windows)
    tier = next(iter(sides.values())).tier
    config = settings.tier(tier)
    result["slo_ttft_ms"] = config.interactive_ttft_slo_ms
    result["slo_tpot_ms"] = config.interactive_itl_slo_ms
    result["slo_measure"] = (
        "share of the trace's interactive requests with first token and mean time "
        "between tokens (client side) within the served tier's SLOs; failed and "
        "unfinished requests are misses"
    )
    result["goodput_measure"] = "tokens/s of batch requests completed inside the trace"
    result["cost_measure"] = COST_MEASURE
    result["quality_measure"] = (
        "percent of the trace's scoring cases answered right; one model on every side, "
        "so not a headline"
    )
    result |= describe(list(events), plan)
    result["blocks"] = max(len(r) for r in runs.values())
    result["side_order"] = list(runs)
    result["with_restart"] = with_restart
    result["tier"] = tier.value
    result["model"] = config.model
    result["llmq_auto_routing"] = (
        "auto -> the served tier: the bench stack runs one worker (one engine at a time "
        "on this host), and its gateway no trained router, with that tier as the default"
    )
    result["host"] = host_description()
    result["engine_dtype"] = engine_dtype(config)
    if "vllm_capped" in sides:
        result["vllm_capped_flood_cap"] = sides["vllm_capped"].target.batch_cap
    result["commit"] = code_commit()
    return result


def engine_dtype(config: TierConfig) -> str:
    """The precision every side's engine was asked for; ``auto`` also names what a CPU
    engine resolves it to (bfloat16 only where the CPU multiplies it in hardware)."""
    if config.dtype != "auto":
        return config.dtype
    from workers.engine.vllm import cpu_dtype

    return f"auto ({cpu_dtype()} on a CPU engine)"


def code_commit() -> str | None:
    """The commit the measured code is at (with ``+dirty`` if it has changes), or None
    outside a git checkout."""
    import subprocess

    folder = Path(__file__).resolve().parent

    def git(*args: str) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            ["git", *args], check=False, cwd=folder, capture_output=True, text=True
        )

    try:
        head = git("rev-parse", "--short", "HEAD")
        changes = git("status", "--porcelain", "--untracked-files=no")
    except OSError:
        return None
    if head.returncode != 0:
        return None
    return head.stdout.strip() + ("+dirty" if changes.stdout.strip() else "")


def _side_details(
    name: str, side_runs: list[SideRun], outcomes: list[Outcome], events: Sequence[Event]
) -> dict[str, Any]:
    """CPU per token, quality, restarts, errors and TTFT samples of one side's
    ``outcomes`` (every block's)."""
    details: dict[str, Any] = {}
    tokens = sum(o.tokens for o in outcomes if o.ok)
    cpu_s = sum(run.cpu_s for run in side_runs)
    details[f"{name}_cpu_s"] = round(cpu_s, 1)
    details[f"{name}_cpu_ms_per_token"] = round(1000.0 * cpu_s / tokens, 2) if tokens else None
    by_process: dict[str, float] = {}
    for run in side_runs:
        for process, seconds in run.cpu_s_by_process.items():
            by_process[process] = round(by_process.get(process, 0.0) + seconds, 1)
    details[f"{name}_cpu_s_by_process"] = by_process
    quality, scored, why = score_quality(events, outcomes)
    details[f"{name}_quality"] = quality
    details[f"{name}_quality_cases_scored"] = scored
    if why is not None:
        details[f"{name}_quality_null_reason"] = why
    details[f"{name}_restart_took_s"] = [run.restart_s for run in side_runs]
    if any(run.share for run in side_runs):
        # One entry a pass: how often the SLO cut batch's share, and the share it ended at.
        for figure in ("batch_share_cuts", "batch_under_interactive"):
            details[f"{name}_{figure}"] = [run.share.get(figure) for run in side_runs]
    restart_errors = [run.restart_error for run in side_runs if run.restart_error]
    if restart_errors:
        details[f"{name}_restart_errors"] = restart_errors
    # Failures by kind (exception and HTTP status), with the requests' kind.
    errors = Counter(f"{o.kind}: {o.error.split(':')[0]}" for o in outcomes if o.error)
    details[f"{name}_errors"] = dict(sorted(errors.items()))
    # Every interactive TTFT in trace order, for the report's distribution plots.
    details[f"{name}_interactive_ttft_samples_ms"] = [
        rounded(o.ttft_ms)
        for o in outcomes
        if o.kind == "interactive" and o.ok and o.ttft_ms is not None
    ]
    return details


def _ratios(figures: dict[str, SideFigures], windows: dict[str, list[float]]) -> dict[str, Any]:
    """llmq's batch goodput over each vLLM baseline's, with a 95% bootstrap interval."""
    ratios: dict[str, Any] = {}
    ours = figures.get("llmq")
    if ours is None:
        return ratios
    for name, theirs in figures.items():
        if name == "llmq":
            continue
        ratio = ours.batch_tok_s / theirs.batch_tok_s if theirs.batch_tok_s else None
        ratios[f"goodput_ratio_vs_{name}"] = None if ratio is None else round(ratio, 3)
        ratios[f"goodput_ratio_vs_{name}_ci95"] = ratio_interval(windows["llmq"], windows[name])
    return ratios


def host_description() -> str:
    """CPU (or GPU), cores and OS, in one line."""
    cpu = platform.processor() or platform.machine() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"
