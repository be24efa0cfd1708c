"""The quick report's worker sharing: which benches reuse a worker, and when it stops."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest

from bench import harness
from schemas.queues import Tier
from schemas.settings import Settings


@pytest.fixture
def starts(monkeypatch: pytest.MonkeyPatch) -> list[list[str]]:
    """Each rig started, as a list that gets "stopped" appended when it stops."""
    log: list[list[str]] = []

    @contextlib.contextmanager
    def fake_start(settings: Settings, tier: Tier, **options: Any) -> Iterator[Any]:
        entry = [f"{tier}/{options['concurrency']}/direct={options['direct_engine']}"]
        log.append(entry)
        try:
            yield entry
        finally:
            entry.append("stopped")

    monkeypatch.setattr(harness, "_start_rig", fake_start)
    return log


def _use(settings: Settings, concurrency: int, *, direct: bool = False) -> Any:
    with harness.bench_rig(
        settings, Tier.SMALL, concurrency=concurrency, direct_engine=direct
    ) as rig:
        return rig


def test_outside_sharing_every_bench_starts_and_stops_its_own_worker(
    starts: list[list[str]],
) -> None:
    settings = Settings()
    _use(settings, 4)
    _use(settings, 4)
    assert starts == [["small/4/direct=False", "stopped"]] * 2


def test_inside_sharing_a_like_worker_is_reused_and_a_different_one_replaces_it(
    starts: list[list[str]],
) -> None:
    settings = Settings()
    with harness.shared_workers():
        first = _use(settings, 4)
        assert _use(settings, 4) is first
        assert first == ["small/4/direct=False"]  # still running between benches
        _use(settings, 16)
        assert first[-1] == "stopped"  # one worker at a time
    assert [entry[-1] for entry in starts] == ["stopped", "stopped"]
    assert len(starts) == 2


def test_an_engine_in_this_process_stops_the_held_worker_first(
    starts: list[list[str]],
) -> None:
    settings = Settings()
    with harness.shared_workers():
        held = _use(settings, 16)
        _use(settings, 16, direct=True)
        assert held[-1] == "stopped"
        assert starts[1] == ["small/16/direct=True", "stopped"]


def test_a_bench_that_fails_does_not_leave_its_worker_to_the_next(
    starts: list[list[str]],
) -> None:
    settings = Settings()
    with harness.shared_workers():
        with (
            pytest.raises(RuntimeError),
            harness.bench_rig(settings, Tier.SMALL, concurrency=4, direct_engine=False) as rig,
        ):
            raise RuntimeError("the bench broke")
        assert rig[-1] == "stopped"
        _use(settings, 4)
    assert len(starts) == 2
