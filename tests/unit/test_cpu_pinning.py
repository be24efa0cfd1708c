"""Which cores the worker keeps for itself beside a CPU engine."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from workers.cpu_pinning import Pinning, kept_off_compute_cores, plan_pinning


def test_the_worker_leaves_the_cores_vllm_bound_its_compute_threads_to() -> None:
    # vLLM's model runner bound to core 0; its engine core process unbound.
    plan = plan_pinning([0, 1], [[0], [0, 1]])
    assert plan == Pinning(compute=frozenset({0}), free=frozenset({1}))


def test_several_compute_workers_are_all_avoided() -> None:
    plan = plan_pinning(range(8), [[0, 1, 2], [3, 4, 5], range(8)])
    assert plan is not None
    assert plan.free == frozenset({6, 7})


def test_nothing_changes_where_vllm_bound_nothing() -> None:
    # A GPU engine: every child may run anywhere.
    assert plan_pinning([0, 1, 2, 3], [[0, 1, 2, 3], [0, 1, 2, 3]]) is None
    assert plan_pinning([0, 1], []) is None


def test_the_worker_is_never_left_without_a_core() -> None:
    assert plan_pinning([0, 1], [[0], [1]]) is None


def test_a_bench_process_gets_its_cores_back_after_driving_an_engine() -> None:
    # A child bound to one core stands in for vLLM's compute worker.
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, "this test needs two cores"
    child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
    stop = threading.Event()
    try:
        os.sched_setaffinity(child.pid, {cores[0]})
        with kept_off_compute_cores() as plan:
            assert plan is not None and plan.compute == frozenset({cores[0]})
            assert cores[0] not in os.sched_getaffinity(0)
            started_meanwhile = threading.Thread(target=stop.wait, daemon=True)
            started_meanwhile.start()
        for thread_id in os.listdir(f"/proc/{os.getpid()}/task"):
            assert sorted(os.sched_getaffinity(int(thread_id))) == cores
    finally:
        stop.set()
        child.kill()
        child.wait()
