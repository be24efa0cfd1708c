"""The engine watch stops a worker whose engine died while it was idle."""

from __future__ import annotations

import threading

from workers.engine_watch import EngineWatch


def test_a_dead_engine_is_reported_once_and_the_watch_ends() -> None:
    states = iter([True, True, False, False])
    called = threading.Event()
    calls: list[int] = []

    def on_dead() -> None:
        calls.append(1)
        called.set()

    watch = EngineWatch(lambda: next(states), on_dead, interval_s=0.01)
    with watch:
        assert called.wait(5)
        watch._thread.join(5)
        assert not watch._thread.is_alive()
    assert calls == [1]


def test_a_check_that_fails_is_not_taken_for_a_dead_engine() -> None:
    checks = 0
    looked_again = threading.Event()

    def alive() -> bool:
        nonlocal checks
        checks += 1
        if checks == 1:
            raise RuntimeError("could not ask")
        looked_again.set()
        return True

    calls: list[int] = []
    with EngineWatch(alive, lambda: calls.append(1), interval_s=0.01):
        assert looked_again.wait(5)
    assert calls == []
