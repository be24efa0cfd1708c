"""Admission of interactive work: refused only when no worker serves its tier, or soon."""

from __future__ import annotations

import threading
import time

import pytest

from producer.admission import WORKER_STALE_S, WorkerDirectory
from schemas.errors import NoWarmWorker
from schemas.queues import Tier
from schemas.registry import WorkerEntry


class ScriptedDirectory(WorkerDirectory):
    """A directory whose registry reads return what the test sets."""

    def __init__(self, *, restart_grace_s: float) -> None:
        super().__init__(None, restart_grace_s=restart_grace_s)  # type: ignore[arg-type]
        self.workers: list[WorkerEntry] = []

    def snapshot(self) -> list[WorkerEntry]:
        return self.workers


def worker(tier: Tier, *, warm: bool) -> WorkerEntry:
    return WorkerEntry(worker_id=f"{tier}-1", tier=tier, concurrency=4, warm=warm)


def test_a_tier_never_served_is_refused() -> None:
    directory = ScriptedDirectory(restart_grace_s=120)
    directory.workers = [worker(Tier.LARGE, warm=True)]
    with pytest.raises(NoWarmWorker, match="no worker serves the small tier"):
        directory.require_warm(Tier.SMALL)


def test_a_starting_worker_serves_soon() -> None:
    directory = ScriptedDirectory(restart_grace_s=0)
    directory.workers = [worker(Tier.SMALL, warm=False)]
    directory.require_warm(Tier.SMALL)


def test_a_restarting_tier_is_served_within_the_grace_only(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    clock = [1000.0]
    monkeypatch.setattr("producer.admission.time.monotonic", lambda: clock[0])
    directory = ScriptedDirectory(restart_grace_s=120)
    directory.workers = [worker(Tier.SMALL, warm=True)]
    directory.require_warm(Tier.SMALL)
    directory.workers = []  # its only worker died; the replacement has not registered
    clock[0] += 119
    directory.require_warm(Tier.SMALL)
    clock[0] += 2
    with pytest.raises(NoWarmWorker):
        directory.require_warm(Tier.SMALL)


class CountingRegistry:
    """Stands in for the registry read: what it holds, and which thread read it."""

    def __init__(self) -> None:
        self.workers: list[WorkerEntry] = []
        self.readers: list[str] = []

    def __call__(self, client: object) -> list[WorkerEntry]:
        # Only the directory under test reads with no client: a directory another test
        # left running in this process reads with its own, and is not counted.
        if client is None:
            self.readers.append(threading.current_thread().name)
        return list(self.workers)


def test_the_registry_is_re_read_in_the_background_not_on_the_submits_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = CountingRegistry()
    monkeypatch.setattr("producer.admission.live_workers", registry)
    monkeypatch.setattr("producer.admission.WORKER_CACHE_S", 0.01)
    directory = WorkerDirectory(None)  # type: ignore[arg-type]
    try:
        assert directory.snapshot() == []  # nothing read yet: read on the caller's path
        assert registry.readers == [threading.current_thread().name]
        registry.workers = [worker(Tier.SMALL, warm=True)]
        deadline = time.monotonic() + 5
        while directory.snapshot() == [] and time.monotonic() < deadline:
            time.sleep(0.005)
        assert directory.snapshot() == registry.workers
        assert set(registry.readers[1:]) == {"llmq-worker-registry"}
    finally:
        directory.close()


def test_a_snapshot_too_old_is_read_on_the_callers_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    registry = CountingRegistry()
    monkeypatch.setattr("producer.admission.live_workers", registry)
    monkeypatch.setattr("producer.admission.WORKER_CACHE_S", 3600.0)  # the reader waits
    clock = [1000.0]
    monkeypatch.setattr("producer.admission.time.monotonic", lambda: clock[0])
    directory = WorkerDirectory(None)  # type: ignore[arg-type]
    try:
        directory.snapshot()
        clock[0] += WORKER_STALE_S - 0.1
        registry.workers = [worker(Tier.SMALL, warm=True)]
        assert directory.snapshot() == []  # fresh enough: the background reader's job
        clock[0] += 0.2
        assert directory.snapshot() == registry.workers
        assert registry.readers == [threading.current_thread().name] * 2
    finally:
        directory.close()


def test_closing_stops_the_background_reader(monkeypatch: pytest.MonkeyPatch) -> None:
    registry = CountingRegistry()
    monkeypatch.setattr("producer.admission.live_workers", registry)
    monkeypatch.setattr("producer.admission.WORKER_CACHE_S", 0.01)
    directory = WorkerDirectory(None)  # type: ignore[arg-type]
    directory.snapshot()
    thread = directory._refresher
    assert thread is not None
    directory.close()
    thread.join(timeout=10)  # a loaded host may take a while to run it: no fixed sleep
    assert not thread.is_alive()
    assert directory._refresher is None  # the thread ended and said so
    reads = len(registry.readers)
    time.sleep(0.1)
    assert len(registry.readers) == reads
