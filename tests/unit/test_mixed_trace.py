"""The mixed workload's trace generator and the report's arithmetic."""

from __future__ import annotations

import itertools
import random

import pytest

from bench.goodput import (
    Outcome,
    Slo,
    busy_seconds,
    quality_percent,
    ratio_interval,
    side_figures,
    side_keys,
    wilson_interval,
)
from bench.trace import (
    SUMMARY_PROMPT,
    SUPPORT_PROMPT,
    TracePlan,
    build_trace,
    describe,
    expected_count,
    poisson_times,
)
from schemas.settings import TierConfig


def test_the_same_plan_gives_the_same_trace_and_another_seed_another() -> None:
    plan = TracePlan(minutes=1, seed=11)
    assert build_trace(plan) == build_trace(plan)
    assert build_trace(plan) != build_trace(TracePlan(minutes=1, seed=12))


def test_events_are_sorted_and_inside_the_run() -> None:
    plan = TracePlan(minutes=1)
    events = build_trace(plan)
    times = [event.t for event in events]
    assert times == sorted(times)
    assert all(0 <= t < plan.duration_s for t in times)


@pytest.mark.parametrize("rate", [0.5, 2.0])
def test_arrivals_are_poisson_with_the_planned_rate(rate: float) -> None:
    rng = random.Random(3)
    seconds = 2000.0
    times = poisson_times(rng, rate, 0.0, seconds)
    mean, sd = expected_count(rate, seconds)
    assert abs(len(times) - mean) < 4 * sd
    gaps = [b - a for a, b in itertools.pairwise(times)]
    # Exponential gaps: their mean is 1/rate and their standard deviation about the same.
    average = sum(gaps) / len(gaps)
    spread = (sum((g - average) ** 2 for g in gaps) / len(gaps)) ** 0.5
    assert average == pytest.approx(1 / rate, rel=0.1)
    assert spread == pytest.approx(1 / rate, rel=0.15)


def test_interactive_and_batch_counts_follow_their_rates() -> None:
    plan = TracePlan(minutes=30, interactive_rate=0.5, batch_rate=1.0, flood_start=0.5)
    events = build_trace(plan)
    interactive = sum(e.kind == "interactive" for e in events)
    batch = sum(e.kind == "batch" for e in events)
    mean, sd = expected_count(0.5, plan.duration_s)
    assert abs(interactive - mean) < 4 * sd
    mean, sd = expected_count(1.0, plan.duration_s - plan.flood_start_s)
    assert abs(batch - mean) < 4 * sd


def test_the_flood_starts_when_configured() -> None:
    plan = TracePlan(minutes=2, flood_start=0.4, batch_rate=2.0)
    events = build_trace(plan)
    batch = [e for e in events if e.kind == "batch"]
    assert batch and min(e.t for e in batch) >= 0.4 * 120
    assert any(e.kind == "interactive" and e.t < 0.4 * 120 for e in events)
    assert not [e for e in build_trace(TracePlan(minutes=2, batch_rate=0.0)) if e.kind == "batch"]


def test_the_mix_of_kinds() -> None:
    plan = TracePlan(minutes=20)
    events = build_trace(plan)
    interactive = [e for e in events if e.kind == "interactive"]
    chats = [e for e in interactive if e.case is None]
    cases = [e for e in interactive if e.case is not None]
    # Most interactive requests carry the support prompt; cases carry none and one turn.
    assert sum(e.system_prompt == SUPPORT_PROMPT for e in interactive) > len(interactive) / 2
    assert all(e.system_prompt is None and len(e.messages) == 1 for e in cases)
    assert 0.15 < len(cases) / len(interactive) < 0.35
    assert {e.difficulty for e in chats} == {"easy", "medium", "hard"}
    easy = sum(e.difficulty == "easy" for e in chats) / len(chats)
    assert easy == pytest.approx(0.5, abs=0.1)
    # Later turns resend the history, append only, with the pinned prompt of the chat.
    later = [e for e in chats if e.turn > 1]
    assert later
    for event in later:
        assert len(event.messages) == 2 * event.turn - 1
        assert [m["role"] for m in event.messages[-2:]] == ["assistant", "user"]
        first = next(e for e in chats if e.conversation == event.conversation and e.turn == 1)
        assert event.messages[0] == first.messages[0]
        assert event.system_prompt == first.system_prompt
        assert event.t - first.t >= plan.think_s
    # The flood: long summaries, batch budget, the summarize prompt.
    batch = [e for e in events if e.kind == "batch"]
    assert all(e.system_prompt == SUMMARY_PROMPT for e in batch)
    assert all(e.max_tokens == plan.batch_max_tokens > plan.interactive_max_tokens for e in batch)
    assert min(len(e.messages[0]["content"]) for e in batch) > 400
    counts = describe(events, plan)
    assert counts["interactive_requests"] == len(interactive)
    assert counts["batch_requests"] == len(batch)


def test_a_plan_that_makes_no_sense_is_refused() -> None:
    with pytest.raises(ValueError, match="mix"):
        TracePlan(mix=(0.5, 0.5, 0.5))
    with pytest.raises(ValueError, match="flood_start"):
        TracePlan(flood_start=1.5)


def test_busy_seconds_is_the_union_of_intervals() -> None:
    assert busy_seconds([]) == 0.0
    assert busy_seconds([(0, 2), (1, 3), (5, 6)]) == pytest.approx(4.0)
    assert busy_seconds([(5, 6), (0, 10)]) == pytest.approx(10.0)


def _outcome(index: int, kind: str, **fields: object) -> Outcome:
    return Outcome(index=index, kind=kind, sent=float(index), **fields)  # type: ignore[arg-type]


def test_side_figures_count_goodput_and_slo_attainment() -> None:
    outcomes = [
        _outcome(
            i,
            "interactive",
            finished=i + 1.0,
            ok=True,
            ttft_ms=100.0 * (i + 1),
            e2e_ms=900.0,
            tokens=9,
        )
        for i in range(4)
    ]
    outcomes += [
        _outcome(4, "batch", finished=9.0, ok=True, tokens=30),
        _outcome(5, "batch", finished=9.5, ok=True, tokens=10),
        _outcome(6, "batch", finished=10.0, cut=True),
        _outcome(7, "interactive", finished=8.0, error="boom"),
    ]
    slo = Slo(ttft_ms=350.0, tpot_ms=100.0)
    figures = side_figures(outcomes, flood_s=4.0, cost_weight=2.0, slo=slo)
    assert figures.ttft_p50_ms == 250.0
    assert figures.ttft_p99_ms == pytest.approx(397.0)
    assert figures.tpot_p50_ms == pytest.approx((900.0 - 250.0) / 8)
    assert figures.batch_completed == 2 and figures.batch_cut == 1
    assert figures.batch_tok_s == 10.0
    assert figures.failed == 1
    assert figures.cost == pytest.approx(2.0 * 10.0)  # busy from 0 to 10 s
    # Within 350 ms and 100 ms a token: the first three of four answered; the failed
    # one is a miss.
    assert (figures.interactive_n, figures.slo_met) == (5, 3)
    keys = side_keys("llmq", figures)
    assert keys["llmq_slo_attainment"] == 0.6
    assert keys["llmq_batch_goodput_tok_s"] == 10.0
    assert keys["llmq_interactive_n"] == 5 and keys["llmq_failed"] == 1
    slow_tokens = _outcome(0, "interactive", ok=True, ttft_ms=10.0, e2e_ms=2010.0, tokens=3)
    assert not slo.met(slow_tokens)  # 1 s between tokens


def test_intervals_of_a_share_and_of_a_ratio() -> None:
    assert wilson_interval(0, 0) is None
    low, high = wilson_interval(99, 100) or (0, 0)
    assert low < 0.99 < high <= 1.0
    assert ratio_interval([1.0] * 10, [2.0] * 10) == (0.5, 0.5)
    assert ratio_interval([1.0], [0.0]) is None
    low, high = ratio_interval([1.0, 3.0] * 5, [2.0] * 10) or (0, 0)
    assert low < 1.0 < high


def test_no_requests_give_no_percentiles() -> None:
    figures = side_figures([], flood_s=0.0, cost_weight=1.0)
    assert figures.ttft_p99_ms is None and figures.batch_tok_s == 0.0 and figures.cost == 0.0
    assert figures.slo_attainment is None


def test_quality_is_a_mean_in_percent_points() -> None:
    assert quality_percent([]) is None
    assert quality_percent([True, False, True, True]) == 75.0
    assert quality_percent([True, 0.5]) == 75.0


def test_a_tier_costs_one_unless_configured() -> None:
    assert TierConfig().cost_weight == 1.0
    assert TierConfig(cost_weight=4.0).cost_weight == 4.0
    with pytest.raises(ValueError):
        TierConfig(cost_weight=0)


def test_the_report_holds_every_side_s_figures_and_the_ratios() -> None:
    from bench.mixed_report import SideRun, report
    from bench.mixed_sides import Side
    from bench.trace import Event
    from schemas.queues import Tier
    from schemas.settings import Settings

    class FakeSide(Side):
        def __init__(self, tier: Tier) -> None:
            self.tier = tier
            self.tiers_served = [tier.value]

    plan = TracePlan(minutes=1, flood_start=0.5)
    case = Event(
        t=1.0,
        kind="interactive",
        messages=({"role": "user", "content": "What time do you open?"},),
        max_tokens=24,
        case="cs-001",  # right when the answer names 8
    )
    batch = Event(t=40.0, kind="batch", messages=({"role": "user", "content": "x"},), max_tokens=9)
    events = [case, batch]
    runs = {
        "vllm_priority": [
            SideRun(
                [
                    _outcome(
                        0, "interactive", finished=9.0, ok=True, ttft_ms=1800.0, e2e_ms=1900.0
                    ),
                    _outcome(1, "batch", finished=45.0, ok=True, tokens=30),
                ]
            )
        ],
        "llmq": [
            SideRun(
                [
                    _outcome(
                        0,
                        "interactive",
                        finished=2.0,
                        ok=True,
                        ttft_ms=200.0,
                        e2e_ms=300.0,
                        text="We open at 8 am.",
                    ),
                    _outcome(1, "batch", finished=50.0, ok=True, tokens=60),
                ],
                cpu_s_by_process={"producer.cli": 2.0, "VLLM::EngineCore": 10.0},
                share={"batch_share_cuts": 3, "batch_under_interactive": 5},
            )
        ],
    }
    settings = Settings()
    sides: dict[str, Side] = {name: FakeSide(Tier.SMALL) for name in runs}
    result = report(settings, plan, events, runs, sides, with_restart=False)
    assert result["vllm_priority_slo_attainment"] == 0.0  # 1.8 s over the 1 s SLO
    assert result["llmq_slo_attainment"] == 1.0
    assert result["llmq_batch_goodput_tok_s"] == 2.0
    assert result["vllm_priority_batch_goodput_tok_s"] == 1.0
    assert result["goodput_ratio_vs_vllm_priority"] == 2.0
    assert result["llmq_interactive_n"] == result["vllm_priority_interactive_n"] == 1
    assert result["llmq_failed"] == result["vllm_priority_failed"] == 0
    assert result["llmq_cpu_ms_per_token"] == round(12000.0 / 60, 2)  # ok tokens: 60 + 0
    assert result["llmq_batch_share_cuts"] == [3]
    assert result["llmq_batch_under_interactive"] == [5]
    assert "vllm_priority_batch_share_cuts" not in result
    assert result["llmq_cpu_s_by_process"] == {"producer.cli": 2.0, "VLLM::EngineCore": 10.0}
    assert result["llmq_quality"] == 100.0 and result["vllm_priority_quality"] == 0.0
    assert result["llmq_interactive_ttft_samples_ms"] == [200.0]
    assert result["slo_ttft_ms"] == 1000.0
    assert result["interactive_requests"] == 1 and result["batch_requests"] == 1
    assert result["host"]
    assert result["engine_dtype"].startswith("auto (")  # what a CPU engine resolves
    assert "commit" in result
