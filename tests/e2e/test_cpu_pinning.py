"""The worker's threads stay off the cores its CPU engine computes on; vLLM's engine
core is left where the OS puts it."""

from __future__ import annotations

import os

import psutil

from workers.worker import worker_pid


def test_the_worker_runs_off_the_engines_compute_cores(worker: str) -> None:
    process = psutil.Process(worker_pid(worker))
    threads_cores = _threads_cores(process.pid)
    # Every thread of the worker, those started after the engine too, has one mask.
    assert len(threads_cores) == 1
    worker_cores = next(iter(threads_cores))
    children = {child.pid: frozenset(child.cpu_affinity()) for child in process.children(True)}
    allowed = frozenset(os.sched_getaffinity(0))
    compute = [cores for cores in children.values() if cores < allowed]
    assert compute, f"vLLM bound no compute worker to cores of its own: {children}"
    assert all(cores.isdisjoint(worker_cores) for cores in compute)
    # The engine core (unbound by vLLM) keeps every core: moved onto the worker's, it
    # would wake to each request and each step's end only after the worker's threads.
    unbound = [pid for pid, cores in children.items() if cores == allowed]
    assert unbound, f"no engine core process among the worker's children: {children}"
    for pid in unbound:
        assert _threads_cores(pid) == {allowed}


def _threads_cores(pid: int) -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir(f"/proc/{pid}/task")}
