"""Which cores the worker keeps for itself beside a CPU engine."""

from __future__ import annotations

import os
import subprocess
import sys
import threading

from workers.cpu_pinning import Pinning, ease_engine_core, kept_off_compute_cores, plan_pinning


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


# A child titled as vLLM titles its engine core (prctl PR_SET_NAME names the calling
# thread), with a second thread of its own.
ENGINE_CORE_STAND_IN = """
import ctypes, threading, time
ctypes.CDLL(None).prctl(15, b"VLLM::EngineCore", 0, 0, 0)
threading.Thread(target=time.sleep, args=(60,), daemon=True).start()
print("up", flush=True)
time.sleep(60)
"""


def _start(script: str) -> subprocess.Popen[str]:
    child = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True)
    assert child.stdout is not None and child.stdout.readline() == "up\n"
    return child


def _niceness(pid: int) -> dict[int, int]:
    tasks = os.listdir(f"/proc/{pid}/task")
    return {int(tid): os.getpriority(os.PRIO_PROCESS, int(tid)) for tid in tasks}


def test_the_engine_cores_main_thread_alone_is_made_nicer_beside_a_cpu_engine() -> None:
    cores = sorted(os.sched_getaffinity(0))
    assert len(cores) >= 2, "this test needs two cores"
    compute = _start("import time; print('up', flush=True); time.sleep(60)")
    core = _start(ENGINE_CORE_STAND_IN)
    base = os.getpriority(os.PRIO_PROCESS, 0)  # what the children inherited
    nicer = min(19, base + 7)
    try:
        os.sched_setaffinity(compute.pid, {cores[0]})  # vLLM's compute worker
        with kept_off_compute_cores():  # as the worker moves itself first
            assert ease_engine_core(0) == []  # 0: left as vLLM started it
            assert set(_niceness(core.pid).values()) == {base}
            assert ease_engine_core(nicer) == [core.pid]
        niceness = _niceness(core.pid)
        assert niceness.pop(core.pid) == nicer
        assert niceness and set(niceness.values()) == {base}  # its other threads keep theirs
        assert set(_niceness(compute.pid).values()) == {base}
    finally:
        for child in (compute, core):
            child.kill()
            child.wait()


def test_no_engine_core_is_touched_where_vllm_bound_nothing() -> None:
    core = _start(ENGINE_CORE_STAND_IN)  # a GPU engine's: no compute worker bound
    base = os.getpriority(os.PRIO_PROCESS, 0)
    try:
        assert ease_engine_core(min(19, base + 7)) == []
        assert set(_niceness(core.pid).values()) == {base}
    finally:
        core.kill()
        core.wait()
