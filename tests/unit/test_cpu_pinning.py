"""Which cores the worker keeps for itself beside a CPU engine."""

from __future__ import annotations

from workers.cpu_pinning import Pinning, plan_pinning


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
