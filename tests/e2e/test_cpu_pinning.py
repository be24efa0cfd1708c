"""The worker's threads stay off the cores its CPU engine computes on."""

from __future__ import annotations

import os

import psutil

from workers.worker import worker_pid


def test_the_worker_and_engine_core_run_off_the_engines_compute_cores(worker: str) -> None:
    process = psutil.Process(worker_pid(worker))
    threads_cores = _threads_cores(process.pid)
    # Every thread of the worker, those started after the engine too, has one mask.
    assert len(threads_cores) == 1
    worker_cores = next(iter(threads_cores))
    children = {child.pid: frozenset(child.cpu_affinity()) for child in process.children(True)}
    compute = [cores for cores in children.values() if not cores <= worker_cores]
    assert compute, f"vLLM bound no compute worker to cores of its own: {children}"
    assert all(cores.isdisjoint(worker_cores) for cores in compute)
    # The engine core's threads moved with it, not only its main thread.
    for pid, cores in children.items():
        if cores <= worker_cores:
            assert _threads_cores(pid) == {cores}


def _threads_cores(pid: int) -> set[frozenset[int]]:
    return {frozenset(os.sched_getaffinity(int(tid))) for tid in os.listdir(f"/proc/{pid}/task")}
