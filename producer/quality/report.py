"""Turning two variants' answers into the gate's report: scores, figures, verdict."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from pydantic import BaseModel, ConfigDict

from producer.quality.cases import Case
from producer.quality.runner import VariantRun
from producer.quality.scoring import Embed, score
from producer.quality.stats import GateResult, Interval, PairedResult, paired_gate
from schemas.percentiles import percentile_or_none

FLIPS_SHOWN = 10


class VariantFigures(BaseModel):
    """One variant's quality and speed on the cases."""

    model_config = ConfigDict(frozen=True)

    tier: str
    quality: Interval
    ttft_ms_p50: float | None
    ttft_ms_p95: float | None
    tok_s: float
    """Completion tokens per second over the whole block (``concurrency`` jobs at once)."""
    mean_output_tokens: float
    failed: int
    wall_s: float
    other_engines: int = 0
    """Workers of other tiers that were up during this variant's block (0: timings alone)."""


class AbReport(BaseModel):
    """Everything ``llmq ab`` reports and stores."""

    model_config = ConfigDict(frozen=True)

    cases: str
    n: int
    a: VariantFigures
    b: VariantFigures
    gate: GateResult
    lost: list[str]
    """Ids of cases A got right and B wrong (the first few)."""
    gained: list[str]
    """Ids of cases B got right and A wrong (the first few)."""
    timing_note: str


def figures(run: VariantRun, quality: Interval, *, other_engines: int = 0) -> VariantFigures:
    """Speed figures of one block beside its quality."""
    answers = list(run.answers.values())
    ttfts = [a.ttft_ms for a in answers if a.ok and a.ttft_ms is not None]
    tokens = [a.completion_tokens for a in answers if a.ok]
    return VariantFigures(
        tier=str(run.tier),
        quality=quality,
        ttft_ms_p50=percentile_or_none(ttfts, 50, ndigits=1),
        ttft_ms_p95=percentile_or_none(ttfts, 95, ndigits=1),
        tok_s=round(sum(tokens) / run.wall_s, 2) if run.wall_s > 0 else 0.0,
        mean_output_tokens=round(float(np.mean(tokens)), 2) if tokens else 0.0,
        failed=sum(not a.ok for a in answers),
        wall_s=round(run.wall_s, 2),
        other_engines=other_engines,
    )


def build_report(
    cases: Sequence[Case],
    run_a: VariantRun,
    run_b: VariantRun,
    *,
    source: str,
    threshold_points: float,
    other_engines: tuple[int, int] = (0, 0),
    embed: Embed | None = None,
) -> AbReport:
    """Score both variants' answers case by case and compare them, paired."""
    pairs: list[PairedResult] = []
    for case in cases:
        a, b = run_a.answers.get(case.id), run_b.answers.get(case.id)
        if a is None or b is None:
            continue
        score_a = score(case, a.text, embed=embed) if a.ok else False
        score_b = score(case, b.text, embed=embed) if b.ok else False
        pairs.append(PairedResult(case.id, score_a, score_b))
    gate = paired_gate(pairs, threshold_points=threshold_points)
    lost = [p.case_id for p in pairs if float(p.a) >= 0.5 > float(p.b)]
    gained = [p.case_id for p in pairs if float(p.b) >= 0.5 > float(p.a)]
    shared = any(other_engines)
    return AbReport(
        cases=source,
        n=gate.n,
        a=figures(run_a, gate.a, other_engines=other_engines[0]),
        b=figures(run_b, gate.b, other_engines=other_engines[1]),
        gate=gate,
        lost=lost[:FLIPS_SHOWN],
        gained=gained[:FLIPS_SHOWN],
        timing_note=(
            "timings shared the host with other engines; compare quality only"
            if shared
            else "each variant's timings come from a block in which only its engine was up"
        ),
    )


def _points(value: float) -> str:
    return f"{100 * value:.1f}"


def render_report(report: AbReport) -> str:
    """The report as a few lines for a person."""
    gate = report.gate
    lines = [f"cases: {report.cases} ({report.n} paired)", ""]
    lines.append(
        f"{'variant':<18} {'quality % (95% CI)':<22} {'TTFT p50/p95 ms':<18} "
        f"{'tok/s':>7} {'mean out':>9} {'failed':>7}"
    )
    for figures_ in (report.a, report.b):
        q = figures_.quality
        ttft = f"{figures_.ttft_ms_p50 or 0:.0f}/{figures_.ttft_ms_p95 or 0:.0f}"
        lines.append(
            f"{figures_.tier:<18} {_points(q.value):>5} [{_points(q.low)}, {_points(q.high)}]"
            f"{'':<6} {ttft:<18} {figures_.tok_s:>7.1f} {figures_.mean_output_tokens:>9.1f} "
            f"{figures_.failed:>7}"
        )
    d = gate.delta
    lines += [
        "",
        f"B - A: {100 * d.value:+.1f} points (95% CI {100 * d.low:+.1f} to {100 * d.high:+.1f}; "
        f"{gate.method})",
        f"flips: {gate.flips.a_only} lost, {gate.flips.b_only} gained "
        f"({100 * gate.flips.rate:.0f}% of cases)"
        + (f"; McNemar p = {gate.mcnemar_p:.3g}" if gate.mcnemar_p is not None else ""),
    ]
    if report.lost:
        lines.append(f"lost: {', '.join(report.lost)}")
    verdict = f"verdict: {gate.verdict.upper()} (threshold -{gate.threshold_points:g} points): "
    lines.append(verdict + gate.reason)
    if gate.verdict == "inconclusive" and gate.cases_needed:
        lines.append(f"about {gate.cases_needed} paired cases would decide it")
    lines.append(f"note: {report.timing_note}")
    return "\n".join(lines)
