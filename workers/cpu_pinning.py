"""Keeping the worker's own threads off the cores vLLM computes on (CPU engines).

vLLM's CPU backend binds its model runner's OpenMP threads to some cores and leaves
the rest (at least one) for everything else. The worker process (Celery's consumer
and job threads, the engine's output loop) starts on every core, so the scheduler may
put one of its threads on a compute core in the middle of a model step, and that step
(every sequence's next token) waits. Once the engine is up, the worker moves its own
threads to the cores left free. On a GPU, or where vLLM bound nothing, nothing changes.

vLLM's engine-core process is left where the OS puts it, as vLLM's own server leaves
it. Moved onto the free cores too, it would share a core with the worker's threads,
and it must run at the end of every step to start the next one (the measurements
behind this are in docs/architecture.md, "The worker's threads stay off the engine's
compute cores"). But its main thread waits out each model step spinning, on a free
core, where it takes half the core from every thread of the queue woken beside it (the
worker's, the gateway's, Redis's). So that thread alone is made nicer
(``ease_engine_core``): it still gets the core whenever nothing else wants it, and the
queue's threads get it first. The engine core's input and output threads, which carry
requests in and tokens out, keep their priority.
"""

from __future__ import annotations

import contextlib
import logging
import os
from collections.abc import Iterable, Iterator
from dataclasses import dataclass

import psutil

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Pinning:
    """Which cores the engine computes on, and which are left for the rest."""

    compute: frozenset[int]
    free: frozenset[int]


def plan_pinning(
    allowed: Iterable[int], child_affinities: Iterable[Iterable[int]]
) -> Pinning | None:
    """The split of ``allowed`` (this process's cores) given its children's cores.

    A child bound to fewer cores than ``allowed`` is one of vLLM's compute workers;
    the others may go anywhere. None when nothing is bound or nothing would be left.
    """
    cores = frozenset(allowed)
    compute = frozenset(
        core
        for affinity in map(frozenset, child_affinities)
        if affinity < cores
        for core in affinity
    )
    free = cores - compute
    if not compute or not free:
        return None
    return Pinning(compute=compute, free=free)


def pin_off_compute_cores() -> Pinning | None:
    """Move this process's threads off the engine's compute cores; threads started
    later inherit the mask, and child processes keep theirs. Returns the split applied,
    or None when there is nothing to do (or the OS refused)."""
    me = psutil.Process()
    try:
        children = [child.cpu_affinity() for child in me.children(recursive=True)]
        plan = plan_pinning(me.cpu_affinity(), children)
        if plan is None:
            return None
        free = sorted(plan.free)
        for thread_id in _thread_ids(me.pid):
            # A thread that ended meanwhile needs no moving.
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(thread_id, free)
    except (psutil.Error, OSError) as exc:
        log.warning("could not keep the worker off the engine's cores (%s)", exc)
        return None
    log.info(
        "engine computes on cores %s; the worker's threads run on %s",
        sorted(plan.compute),
        free,
    )
    return plan


ENGINE_CORE_TITLE = "VLLM::EngineCor"
"""The title vLLM gives its engine-core process, as the kernel keeps it (15 characters)."""


def ease_engine_core(nice: int) -> list[int]:
    """On a CPU engine (where ``plan_pinning`` splits the engine core's cores), set the
    main thread of vLLM's engine-core process (a child of this process) to ``nice``.
    Returns the processes eased: none for ``nice`` 0 (the thread is left as vLLM
    started it), on a GPU, where vLLM bound nothing, or where the OS refused."""
    if not nice:
        return []
    try:
        children = psutil.Process().children(recursive=True)
        cores = {child.pid: child.cpu_affinity() for child in children}
        # Split against the engine core's own cores, not this process's: the worker
        # may have moved itself off the compute cores already.
        eased = [
            child.pid
            for child in children
            if child.name().startswith(ENGINE_CORE_TITLE)
            and plan_pinning(cores[child.pid], cores.values()) is not None
        ]
        for pid in eased:
            # The process's id is its main thread's: the one that spins.
            os.setpriority(os.PRIO_PROCESS, pid, nice)
    except (psutil.Error, OSError) as exc:
        log.warning("could not ease the engine core's wait (%s)", exc)
        return []
    if eased:
        log.info("the engine core's main thread (process %s) runs at nice %d", eased, nice)
    return eased


@contextlib.contextmanager
def kept_off_compute_cores() -> Iterator[Pinning | None]:
    """:func:`pin_off_compute_cores` for a while: afterwards every thread of this
    process (those started meanwhile too, which inherited the narrow mask) gets back
    the cores the process had, so processes it starts later may use them all."""
    cores = os.sched_getaffinity(0)
    try:
        yield pin_off_compute_cores()
    finally:
        for thread_id in _thread_ids(os.getpid()):
            with contextlib.suppress(ProcessLookupError):
                os.sched_setaffinity(thread_id, cores)


def _thread_ids(pid: int) -> list[int]:
    # sched_setaffinity on a pid moves one thread: every existing thread is moved.
    return [int(name) for name in os.listdir(f"/proc/{pid}/task")]
