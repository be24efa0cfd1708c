"""Chunking a conversation for summary steps, and choosing a night's work."""

from __future__ import annotations

from datetime import UTC, date, datetime

import pytest
from hypothesis import given
from hypothesis import strategies as st

from workers.summaries.chunking import chunk_pieces, render_turn, step_budget
from workers.summaries.night import (
    Action,
    Candidate,
    day_window,
    plan_night,
    previous_day,
    step_key,
)


def words(text: str) -> int:
    return len(text.split())


def test_chunks_end_on_turn_boundaries_and_fit() -> None:
    turns = [render_turn("user", "one two three"), render_turn("assistant", "four five")]
    turns += [render_turn("user", "six seven eight nine")]
    chunks = chunk_pieces(turns, budget=7, count=words)
    assert chunks == [
        "USER: one two three\nASSISTANT: four five",
        "USER: six seven eight nine",
    ]


def test_everything_in_one_chunk_when_it_fits() -> None:
    turns = ["USER: hi", "ASSISTANT: hello"]
    assert chunk_pieces(turns, budget=100, count=words) == ["USER: hi\nASSISTANT: hello"]


def test_a_turn_longer_than_the_budget_alone_is_cut_at_words_and_nothing_is_lost() -> None:
    long_turn = "USER: " + " ".join(f"w{i}" for i in range(25))
    chunks = chunk_pieces(["USER: short", long_turn, "ASSISTANT: ok"], budget=10, count=words)
    assert all(words(chunk) <= 10 for chunk in chunks)
    assert chunks[0] == "USER: short"  # the long turn starts a chunk of its own
    assert " ".join(chunks).split() == ["USER:", "short", *long_turn.split(), "ASSISTANT:", "ok"]


def test_a_single_word_over_the_budget_is_cut_by_characters() -> None:
    chunks = chunk_pieces(["x" * 100], budget=10, count=len)
    assert all(len(chunk) <= 10 for chunk in chunks)
    assert "".join(chunks) == "x" * 100


@given(
    st.lists(st.text(alphabet="ab ", min_size=1, max_size=40), min_size=1, max_size=12),
    st.integers(min_value=3, max_value=30),
)
def test_every_chunk_fits_and_keeps_the_order(pieces: list[str], budget: int) -> None:
    chunks = chunk_pieces(pieces, budget=budget, count=len)
    assert all(len(chunk) <= budget for chunk in chunks)
    assert "".join(chunks).replace("\n", "").replace(" ", "") == "".join(pieces).replace(" ", "")


def test_the_step_budget_leaves_room_for_prompt_and_answer() -> None:
    assert step_budget(context=4096, max_tokens=200, prompt_tokens=150) == 4096 - 200 - 150 - 64
    with pytest.raises(ValueError, match="LLMQ_SUMMARY_CONTEXT_TOKENS"):
        step_budget(context=300, max_tokens=200, prompt_tokens=150)


def test_a_night_creates_new_resumes_pending_and_skips_finished() -> None:
    candidates = [Candidate("a", "c1", 2), Candidate("a", "c2", 4), Candidate("b", "c1", 2)]
    candidates.append(Candidate("b", "c3", 1))
    existing = {("a", "c2"): "pending", ("b", "c1"): "done", ("b", "c3"): "failed"}
    assert [action for _, action in plan_night(candidates, existing)] == [
        Action.NEW,
        Action.RESUME,
        Action.SKIP,
        Action.SKIP,
    ]


def test_a_day_is_the_configured_time_zone_s_day() -> None:
    assert day_window(date(2026, 3, 1), "UTC") == (
        datetime(2026, 3, 1, tzinfo=UTC),
        datetime(2026, 3, 2, tzinfo=UTC),
    )
    start, end = day_window(date(2026, 7, 1), "Europe/Berlin")
    assert start == datetime(2026, 6, 30, 22, tzinfo=UTC)
    assert end == datetime(2026, 7, 1, 22, tzinfo=UTC)
    # 00:30 UTC on the 2nd is already 02:30 on the 2nd in Berlin: yesterday is the 1st.
    assert previous_day(datetime(2026, 7, 2, 0, 30, tzinfo=UTC), "Europe/Berlin") == date(
        2026, 7, 1
    )
    assert previous_day(datetime(2026, 7, 2, 0, 30, tzinfo=UTC), "America/New_York") == date(
        2026, 6, 30
    )


def test_step_keys_name_one_step_of_one_conversation_and_day() -> None:
    key = step_key("a", "c1", date(2026, 3, 1), stage="map1", index=2, attempt=0)
    assert key == step_key("a", "c1", date(2026, 3, 1), stage="map1", index=2, attempt=0)
    assert key != step_key("b", "c1", date(2026, 3, 1), stage="map1", index=2, attempt=0)
    assert key != step_key("a", "c1", date(2026, 3, 1), stage="map1", index=2, attempt=1)
    assert len(key) <= 200
