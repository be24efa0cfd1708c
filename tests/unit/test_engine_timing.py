"""The warm engine's timing of a lone request, from the deltas it yields."""

from __future__ import annotations

from collections.abc import Iterator, Sequence

import pytest

from workers.engine.base import Delta, EngineRequest
from workers.registry import EngineTiming
from workers.warmup import WARMUP_TOP_LOGPROBS, time_engine, warm_up


class ScriptedEngine:
    """Yields one delta per (seconds since the request's start, tokens so far)."""

    def __init__(self, clock: list[float], deltas: Sequence[tuple[float, int]]) -> None:
        self._clock = clock
        self._deltas = deltas

    def render_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return [1, 2, 3]

    def stream(self, request: EngineRequest) -> Iterator[Delta]:
        started = self._clock[0]
        last_tokens = self._deltas[-1][1]
        for at, tokens in self._deltas:
            self._clock[0] = started + at
            yield Delta(text="x", completion_tokens=tokens, finished=tokens == last_tokens)
        self._clock[0] += 1.0  # the next run starts later


def timed(deltas: Sequence[tuple[float, int]]) -> EngineTiming:
    clock = [100.0]
    engine = ScriptedEngine(clock, deltas)
    return time_engine(engine, clock=lambda: clock[0])  # type: ignore[arg-type]


def test_a_lone_request_gives_the_first_token_and_the_step() -> None:
    # First token at 50 ms, then a delta every 40 ms, one of them carrying two tokens.
    timing = timed([(0.05, 1), (0.09, 2), (0.17, 4), (0.21, 5)])
    assert timing.first_token_s == pytest.approx(0.05)
    assert timing.step_s == pytest.approx(0.04)
    assert timing.step_share == pytest.approx(0.8)


def test_one_delta_counts_as_a_step_as_long_as_the_request() -> None:
    timing = timed([(0.06, 1)])
    assert timing.first_token_s == pytest.approx(0.06)
    assert timing.step_s == pytest.approx(0.06)


class RecordingEngine:
    """Answers every request with one token and keeps what it was asked."""

    def __init__(self) -> None:
        self.requests: list[EngineRequest] = []

    def render_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        return [1, 2, 3]

    def stream(self, request: EngineRequest) -> Iterator[Delta]:
        self.requests.append(request)
        yield Delta(text="x", completion_tokens=1, finished=True)


def test_warm_up_asks_for_log_probabilities_once_before_the_concurrent_pass() -> None:
    """vLLM compiles its log-probability kernel at the first request that asks for
    them: warm-up pays for it, not the first person who does."""
    engine = RecordingEngine()
    warm_up(engine, concurrency=3)  # type: ignore[arg-type]
    asked = [r.options.sampling.logprobs for r in engine.requests if r.options.sampling]
    assert asked == [WARMUP_TOP_LOGPROBS]
    assert len(engine.requests) == 2 + 3
    assert engine.requests[1].request_id == "warmup-logprobs"
