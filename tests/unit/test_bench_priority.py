"""The priority bench's model of the one-step wait, the step time it reads, and when it
sends each request."""

from __future__ import annotations

import itertools
import random
from collections import Counter

import pytest

from bench.harness import SETTLE_S
from bench.priority import (
    ARRIVAL_JITTER_S,
    FloodCounts,
    SideSamples,
    arrival_pauses,
    decode_step_ms,
    idle_plus_step_wait_ratio,
    one_step_wait_ratio,
    phases,
    queue_path_ms,
)
from schemas.events import Timings, Usage
from schemas.jobs import JobResult, JobStatus
from schemas.queues import Priority, Tier


def result(
    tokens: int, ttft_ms: float | None, total_ms: float, engine_ttft_ms: float | None = None
) -> JobResult:
    return JobResult(
        job_id="j",
        status=JobStatus.DONE,
        text="x" * tokens,
        tier=Tier.SMALL,
        priority=Priority.INTERACTIVE,
        usage=Usage(prompt_tokens=5, completion_tokens=tokens),
        timings=Timings(
            queue_wait_ms=1.0, ttft_ms=ttft_ms, total_ms=total_ms, engine_ttft_ms=engine_ttft_ms
        ),
        worker_id="w",
    )


def test_the_step_is_the_time_after_the_first_token_over_the_tokens_after_it() -> None:
    assert decode_step_ms(result(8, 50.0, 330.0)) == pytest.approx(40.0)


@pytest.mark.parametrize(("tokens", "ttft_ms"), [(1, 50.0), (0, None), (4, None)])
def test_an_answer_without_a_second_token_has_no_step(tokens: int, ttft_ms: float | None) -> None:
    assert decode_step_ms(result(tokens, ttft_ms, 90.0)) is None


def test_the_model_adds_nearly_one_step_to_the_idle_median() -> None:
    idle = [50.0] * 98 + [60.0, 60.0]
    # p50 50, p99 60: (50 + 0.98 * 40) / 60
    assert one_step_wait_ratio(idle, 40.0) == pytest.approx(89.2 / 60.0)


def test_a_step_short_against_the_first_token_keeps_the_model_near_one() -> None:
    idle = [40.0] * 100
    assert one_step_wait_ratio(idle, 10.0) == pytest.approx(1.245)


def test_requests_are_sent_at_random_points_of_an_engine_step() -> None:
    pauses = list(itertools.islice(arrival_pauses(random.Random(7)), 400))
    assert all(SETTLE_S <= p <= SETTLE_S + ARRIVAL_JITTER_S for p in pauses)
    # A fixed pause after a step's end lands in one place of a 50 ms step every time;
    # these land in every fifth of it, each about as often.
    step_s = 0.05
    fifths = Counter(int((p % step_s) / step_s * 5) for p in pauses)
    assert sorted(fifths) == [0, 1, 2, 3, 4]
    assert min(fifths.values()) > 400 / 5 * 0.6


def test_the_same_seed_sends_at_the_same_moments() -> None:
    first = list(itertools.islice(arrival_pauses(random.Random(3)), 5))
    assert first == list(itertools.islice(arrival_pauses(random.Random(3)), 5))
    assert first != list(itertools.islice(arrival_pauses(random.Random(4)), 5))


def test_no_jitter_is_the_fixed_pause() -> None:
    pauses = itertools.islice(arrival_pauses(random.Random(7), 0.0), 3)
    assert list(pauses) == [SETTLE_S] * 3


def test_the_sides_alternate_in_abba_order_with_every_sample_placed() -> None:
    assert phases(100, 2) == [(False, 25), (True, 50), (False, 50), (True, 50), (False, 25)]
    assert phases(100, 1) == [(False, 50), (True, 100), (False, 50)]


@pytest.mark.parametrize(("samples", "blocks"), [(101, 2), (103, 3), (100, 4)])
def test_each_side_gets_all_its_samples(samples: int, blocks: int) -> None:
    plan = phases(samples, blocks)
    assert sum(size for loaded, size in plan if loaded) == samples
    assert sum(size for loaded, size in plan if not loaded) == samples
    assert [loaded for loaded, _ in plan] == [False, True] * blocks + [False]


@pytest.mark.parametrize(("samples", "blocks"), [(100, 0), (3, 2)])
def test_too_few_samples_for_the_blocks_are_refused(samples: int, blocks: int) -> None:
    with pytest.raises(ValueError, match="blocks"):
        phases(samples, blocks)


def test_the_queue_path_is_the_first_token_less_the_engines_part() -> None:
    assert queue_path_ms(52.5, result(8, 50.0, 330.0, engine_ttft_ms=41.0)) == pytest.approx(11.5)


def test_no_queue_path_where_the_worker_timed_no_engine_part() -> None:
    assert queue_path_ms(52.5, result(8, 50.0, 330.0)) is None


def test_with_no_spread_the_mix_is_the_idle_time_plus_an_even_wait() -> None:
    # 50 ms every time, plus 0..40 ms: the p99 is 50 + 0.99 * 40.
    assert idle_plus_step_wait_ratio([50.0] * 100, 40.0) == pytest.approx(89.6 / 50.0)


def test_an_idle_tail_and_the_wait_add_up() -> None:
    idle = [40.0] * 98 + [80.0, 80.0]
    # The 98 fast ones end by 50 ms; the last 1% is half-way through the slow ones' wait.
    assert idle_plus_step_wait_ratio(idle, 10.0) == pytest.approx(85.0 / 80.0)


def test_attainment_is_the_share_of_samples_inside_the_slos() -> None:
    samples = SideSamples(met=[True, True, False, True])
    assert samples.attainment() == 0.75
    assert SideSamples().attainment() is None


def test_batch_throughput_is_tokens_over_the_loaded_phases_time() -> None:
    counts = FloodCounts(tokens_during=900, seconds=30.0)
    assert counts.tokens_per_s() == 30.0
    assert FloodCounts().tokens_per_s() is None
