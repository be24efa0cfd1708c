"""Admission of interactive work: refused only when no worker serves its tier, or soon."""

from __future__ import annotations

import pytest

from producer.admission import WorkerDirectory
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
