"""``llmq bench warm``'s pacing: the first request and the ones it is compared with
start alike."""

from __future__ import annotations

from bench.warm import IDLE_BEFORE_EACH_S, after_equal_idle


def test_every_warm_request_starts_after_the_same_idle_the_first_included() -> None:
    happened: list[tuple[str, object]] = []

    def take(question: str) -> str:
        happened.append(("take", question))
        return question.upper()

    samples = after_equal_idle(
        take, ["first", "second"], label="warm", sleep=lambda s: happened.append(("idle", s))
    )
    assert samples == ["FIRST", "SECOND"]
    assert happened == [
        ("idle", IDLE_BEFORE_EACH_S),
        ("take", "first"),
        ("idle", IDLE_BEFORE_EACH_S),
        ("take", "second"),
    ]
