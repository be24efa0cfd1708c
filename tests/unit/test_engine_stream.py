"""The vLLM engine wrapper's pure parts: merged deltas and the engine's arguments."""

from __future__ import annotations

import asyncio
import queue
import time
from collections.abc import AsyncIterator
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from schemas.settings import TierConfig
from workers.engine import vllm as vllm_engine
from workers.engine.base import Delta, EngineRequest, SamplingOptions
from workers.engine.vllm import VllmEngine, _coalesce, cpu_dtype, engine_arguments


def delta(text: str, tokens: int, *, finished: bool = False, cached: int | None = None) -> Delta:
    return Delta(text=text, completion_tokens=tokens, finished=finished, cached_tokens=cached)


def test_deltas_waiting_behind_one_go_out_as_one() -> None:
    waiting: queue.SimpleQueue[Any] = queue.SimpleQueue()
    for item in (delta(" wor", 2), delta("ld", 3, finished=True)):
        waiting.put(item)
    merged, pending = _coalesce(delta("Hello", 1, cached=64), waiting)
    assert (merged.text, merged.completion_tokens, merged.finished) == ("Hello world", 3, True)
    assert merged.cached_tokens == 64
    assert pending is None


def test_a_delta_goes_out_alone_when_nothing_waits_and_stops_at_a_non_delta() -> None:
    waiting: queue.SimpleQueue[Any] = queue.SimpleQueue()
    alone, pending = _coalesce(delta("a", 1), waiting)
    assert (alone.text, pending) == ("a", None)
    end = object()
    waiting.put(delta("b", 2))
    waiting.put(end)
    waiting.put(delta("never", 3))
    merged, pending = _coalesce(delta("a", 1), waiting)
    assert merged.text == "ab"
    assert pending is end  # handed back, not lost


def test_the_engine_schedules_by_the_tiers_policy() -> None:
    assert engine_arguments("/m", TierConfig())["scheduling_policy"] == "priority"
    fcfs = TierConfig(scheduling_policy="fcfs")
    assert engine_arguments("/m", fcfs)["scheduling_policy"] == "fcfs"


@pytest.mark.parametrize(
    ("flags", "dtype"),
    [
        ("fpu sse avx2 avx512f amx_bf16 amx_tile amx_int8", "bfloat16"),
        ("fpu sse avx2 avx512f avx512_bf16", "bfloat16"),
        ("fpu sse avx2 avx512f avx512_vnni", "float32"),
        ("fpu sse avx2 fma", "float32"),
    ],
)
def test_a_cpu_engine_runs_bfloat16_only_where_the_cpu_multiplies_it(
    tmp_path: Path, flags: str, dtype: str
) -> None:
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text(f"processor\t: 0\nflags\t\t: {flags}\n")
    assert cpu_dtype(cpuinfo) == dtype
    assert cpu_dtype(tmp_path / "missing") == "float32"


class HandOverEngine:
    """An AsyncLLM stand-in: ``generate`` awaits ``self.add_request`` first, as vLLM's does,
    and the hand-over takes a while."""

    def __init__(self) -> None:
        self.held: list[str] = []
        self.prompts: list[Any] = []

    async def add_request(self, request_id: str, *_args: Any, **_kwargs: Any) -> None:
        await asyncio.sleep(0.002)
        self.held.append(request_id)

    async def generate(
        self, prompt: Any, _params: Any, request_id: str, **_kwargs: Any
    ) -> AsyncIterator[Any]:
        self.prompts.append(prompt)
        await self.add_request(request_id)
        completion = SimpleNamespace(text="hi", token_ids=[1], finish_reason="stop")
        yield SimpleNamespace(outputs=[completion], finished=True, num_cached_tokens=0)

    def shutdown(self) -> None:
        pass


def test_stream_returns_once_the_engine_holds_the_request(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # Long enough that a busy test host cannot make the wait run out first.
    monkeypatch.setattr(vllm_engine, "HANDOVER_WAIT_S", 30.0)
    engine = VllmEngine(model_path="unused", config=TierConfig(model="unused"))
    fake = HandOverEngine()
    engine._engine = fake  # type: ignore[assignment]
    engine._signal_handovers(fake)  # type: ignore[arg-type]
    engine._thread.start()
    # vLLM's first import takes seconds (more on a busy host); it is not the wait tested.
    vllm_engine.sampling_params(SamplingOptions(max_tokens=1))
    try:
        started = time.monotonic()
        deltas = engine.stream(EngineRequest([1, 2], SamplingOptions(max_tokens=1), "job-1"))
        # The caller's next work (the claim) starts only now: the engine has it, and
        # stream did not wait longer than that.
        assert fake.held == ["job-1"]
        assert time.monotonic() - started < 10.0
        assert [d.text for d in deltas] == ["hi"]
        assert engine._handovers == {}
        # Rendered, as vLLM's server hands a prompt over: AsyncLLM.add_request builds
        # a prompt with a "type" into its request on the loop, not in a thread pool.
        assert fake.prompts == [{"type": "token", "prompt_token_ids": [1, 2]}]
    finally:
        engine.shutdown()


def test_engine_runs_on_uvloop_where_it_is_installed() -> None:
    import uvloop  # a dependency of the worker's extras

    loop = vllm_engine.engine_event_loop()
    try:
        assert isinstance(loop, uvloop.Loop)
    finally:
        loop.close()


def test_engine_runs_on_asyncios_loop_without_uvloop(monkeypatch: pytest.MonkeyPatch) -> None:
    import sys

    monkeypatch.setitem(sys.modules, "uvloop", None)  # import now raises ImportError
    loop = vllm_engine.engine_event_loop()
    try:
        assert type(loop).__module__.startswith("asyncio")
        assert loop.run_until_complete(asyncio.sleep(0, result=7)) == 7
    finally:
        loop.close()


def test_step_limits_reach_the_engine_only_when_set() -> None:
    from workers.engine.vllm import CPU_LONG_PREFILL_TOKENS, running_on_cpu

    plain = engine_arguments("/m", TierConfig())
    assert "max_num_batched_tokens" not in plain
    if running_on_cpu():
        assert plain["long_prefill_token_threshold"] == CPU_LONG_PREFILL_TOKENS
    else:
        assert "long_prefill_token_threshold" not in plain
    limited = engine_arguments("/m", TierConfig(max_num_batched_tokens=512, long_prefill_tokens=64))
    assert limited["max_num_batched_tokens"] == 512
    assert limited["long_prefill_token_threshold"] == 64


class ThreeTokenEngine(HandOverEngine):
    """Streams "a", "b", "c", one token each, the last one finished."""

    async def generate(
        self, prompt: Any, _params: Any, request_id: str, **_kwargs: Any
    ) -> AsyncIterator[Any]:
        self.prompts.append(prompt)
        await self.add_request(request_id)
        for index, text in enumerate("abc"):
            await asyncio.sleep(0.2)  # an engine step: the reader takes each delta alone
            last = index == 2
            completion = SimpleNamespace(
                text=text, token_ids=[index], finish_reason="length" if last else None
            )
            yield SimpleNamespace(outputs=[completion], finished=last, num_cached_tokens=7)


@pytest.mark.parametrize(
    ("stream_tokens", "expected"),
    [
        (True, [("a", 1, False), ("b", 2, False), ("c", 3, True)]),
        # Held: an empty delta at the first token, then the whole answer in one.
        (False, [("", 1, False), ("abc", 3, True)]),
    ],
)
def test_an_answer_that_goes_out_in_one_piece_still_marks_its_first_token(
    monkeypatch: pytest.MonkeyPatch, stream_tokens: bool, expected: list[tuple[str, int, bool]]
) -> None:
    monkeypatch.setattr(vllm_engine, "HANDOVER_WAIT_S", 30.0)
    monkeypatch.setattr(vllm_engine, "sampling_params", lambda _options: None)
    engine = VllmEngine(model_path="unused", config=TierConfig(model="unused"))
    fake = ThreeTokenEngine()
    engine._engine = fake  # type: ignore[assignment]
    engine._signal_handovers(fake)  # type: ignore[arg-type]
    engine._thread.start()
    try:
        options = SamplingOptions(max_tokens=3, stream_tokens=stream_tokens)
        stream = engine.stream(EngineRequest([1, 2], options, "job-1"))
        seen = [(item.text, item.completion_tokens, item.finished) for item in stream]
        assert seen == expected
    finally:
        engine.shutdown()


def test_held_deltas_merge_into_one() -> None:
    parts = [delta("a", 1, cached=5), delta("b", 2), delta("c", 3, finished=True)]
    merged = vllm_engine.merged_deltas(parts)
    assert (merged.text, merged.completion_tokens, merged.finished) == ("abc", 3, True)
    assert merged.cached_tokens == 5
