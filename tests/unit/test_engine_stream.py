"""The vLLM engine wrapper's pure parts: merged deltas and the engine's arguments."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import pytest

from schemas.settings import TierConfig
from workers.engine.base import Delta
from workers.engine.vllm import _coalesce, cpu_dtype, engine_arguments


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
