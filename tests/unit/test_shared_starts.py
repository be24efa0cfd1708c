"""The quick report's sharing: which benches reuse a worker or an engine, and when it stops."""

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
    """Each worker or engine started, as a list that gets "stopped" appended when it stops."""
    log: list[list[str]] = []

    @contextlib.contextmanager
    def fake_worker(settings: Settings, tier: Tier, **options: Any) -> Iterator[Any]:
        env = options["env"] or {}
        entry = [f"worker {tier}/{options['concurrency']} env={sorted(env)}"]
        log.append(entry)
        try:
            yield entry
        finally:
            entry.append("stopped")

    class FakeEngine:
        def __init__(self, entry: list[str]) -> None:
            self.entry = entry

        @classmethod
        def start(cls, *, model_path: str, config: Any) -> FakeEngine:
            entry = [f"engine {config.concurrency}"]
            log.append(entry)
            return cls(entry)

        def shutdown(self) -> None:
            self.entry.append("stopped")

    monkeypatch.setattr(harness, "_start_rig", fake_worker)
    monkeypatch.setattr(harness, "VllmEngine", FakeEngine)
    monkeypatch.setattr(harness, "resolve_model", lambda model, bundled: "model")
    return log


def _use(settings: Settings, concurrency: int | None = None, **options: Any) -> Any:
    with harness.bench_rig(settings, Tier.SMALL, concurrency=concurrency, **options) as rig:
        return rig


def _engine(settings: Settings, **options: Any) -> Any:
    with harness.engine_only(settings, Tier.SMALL, **options) as engine:
        return engine.entry  # type: ignore[attr-defined]


def test_outside_sharing_every_bench_starts_and_stops_its_own_worker(
    starts: list[list[str]],
) -> None:
    settings = Settings()
    _use(settings, 4, prefill_prompts=False)
    _use(settings, 4)
    assert starts == [
        ["worker small/4 env=['LLMQ_PREFILL_PROMPTS']", "stopped"],
        ["worker small/4 env=[]", "stopped"],
    ]


def test_a_worker_gets_the_tiers_slots_unless_told_otherwise(starts: list[list[str]]) -> None:
    _use(Settings())
    assert starts[0][0].startswith("worker small/16 ")


def test_inside_sharing_a_like_worker_is_reused_and_a_different_one_replaces_it(
    starts: list[list[str]],
) -> None:
    settings = Settings()
    with harness.shared_starts():
        first = _use(settings, 4)
        assert _use(settings, 4, prefill_prompts=False) is first
        assert first == ["worker small/4 env=['LLMQ_PREFILL_INTERVAL_S']"]  # prefilled once
        _use(settings, 16)
        assert first[-1] == "stopped"  # one worker at a time
    assert [entry[-1] for entry in starts] == ["stopped", "stopped"]
    assert len(starts) == 2


def test_inside_sharing_an_engine_is_reused_and_a_worker_replaces_it(
    starts: list[list[str]],
) -> None:
    settings = Settings()
    with harness.shared_starts():
        held = _use(settings)
        engine = _engine(settings)
        assert held[-1] == "stopped"  # one engine at a time
        assert _engine(settings, concurrency=16) is engine
        assert engine == ["engine 16"]
        _use(settings)
        assert engine[-1] == "stopped"
    assert len(starts) == 3


def test_a_fresh_engine_is_never_shared(starts: list[list[str]]) -> None:
    settings = Settings()
    with harness.shared_starts():
        held = _engine(settings)
        fresh = _engine(settings, fresh=True)
        assert held[-1] == "stopped"
        assert fresh == ["engine 16", "stopped"]
        assert _engine(settings) is not fresh


def test_a_bench_that_fails_does_not_leave_its_worker_to_the_next(
    starts: list[list[str]],
) -> None:
    settings = Settings()
    with harness.shared_starts():
        with (
            pytest.raises(RuntimeError),
            harness.bench_rig(settings, Tier.SMALL, concurrency=4),
        ):
            raise RuntimeError("the bench broke")
        assert starts[0][-1] == "stopped"
        _use(settings, 4)
    assert len(starts) == 2
