"""The worker's threads stay off the cores its CPU engine computes on; vLLM's engine
core is left where the OS puts it, its spinning main thread made nicer."""

from __future__ import annotations

import os
from pathlib import Path

import psutil

from schemas.settings import Settings
from workers.cpu_pinning import ENGINE_CORE_TITLE
from workers.worker import worker_pid


def test_the_worker_runs_off_the_engines_compute_cores(worker: str) -> None:
    process = psutil.Process(worker_pid(worker))
    threads_cores = _threads_cores(process.pid)
    # Every thread of the worker, those started after the engine too, has one mask.
    assert len(threads_cores) == 1
    worker_cores = next(iter(threads_cores))
    children = {child.pid: frozenset(child.cpu_affinity()) for child in process.children(True)}
    compute = {pid for pid, cores in children.items() if cores.isdisjoint(worker_cores)}
    assert compute, f"vLLM bound no compute worker to cores the worker left: {children}"
    # The others (vLLM's engine core) keep every core, as vLLM started them: moved
    # onto the worker's core, the engine core finished each step later.
    allowed = {frozenset(os.sched_getaffinity(0))}
    others = set(children) - compute
    assert others, f"no engine core process among the worker's children: {children}"
    for pid in others:
        assert _threads_cores(pid) == allowed, f"process {pid} was moved: {children}"


def _threads_cores(pid: int) -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir(f"/proc/{pid}/task")}


def test_only_the_engine_cores_main_thread_is_made_nicer(
    worker: str, e2e_settings: Settings
) -> None:
    process = psutil.Process(worker_pid(worker))
    cores = [c for c in process.children(True) if c.name().startswith(ENGINE_CORE_TITLE)]
    assert len(cores) == 1, f"no single engine core among {process.children(True)}"
    core = cores[0]
    niceness = {
        int(tid): os.getpriority(os.PRIO_PROCESS, int(tid))
        for tid in os.listdir(f"/proc/{core.pid}/task")
    }
    assert niceness.pop(core.pid) == e2e_settings.engine_core_nice > 0
    # Its input and output threads carry requests in and tokens out at once.
    assert niceness and set(niceness.values()) == {0}, niceness


def test_an_eager_engine_compiles_nothing(worker: str) -> None:
    """A CPU tier runs eagerly: its engine processes do not compile vLLM's sampler
    helpers (seconds at the first request asking for log probabilities)."""
    process = psutil.Process(worker_pid(worker))
    engines = [child for child in process.children(True) if child.name().startswith("VLLM::")]
    assert engines, process.children(True)
    for child in engines:
        # Read raw: vLLM retitles its processes over the start of that block, which
        # psutil's parser then reads as empty.
        environ = Path(f"/proc/{child.pid}/environ").read_bytes()
        assert b"\0TORCHDYNAMO_DISABLE=1\0" in environ, child
