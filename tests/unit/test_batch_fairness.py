"""Feeders shared fairly across keys: the order batches are taken in, and when a
key fed more than its share gives a feeder up."""

from __future__ import annotations

from collections import Counter

from producer.batches.runner import ActiveBatch, fair_order, over_share


def waiting(*owners: str) -> list[ActiveBatch]:
    return [ActiveBatch(f"b{i}-{owner}", owner, True) for i, owner in enumerate(owners)]


def test_one_keys_many_batches_do_not_go_before_another_keys_one() -> None:
    # Ten batches of key a, oldest first, then one of key b: b's is taken second.
    order = fair_order(waiting(*["a"] * 10, "b"), Counter())
    assert [b.owner for b in order[:4]] == ["a", "b", "a", "a"]
    assert [b.id for b in order if b.owner == "a"] == [f"b{i}-a" for i in range(10)]


def test_keys_already_fed_go_after_keys_that_are_not() -> None:
    order = fair_order(waiting("a", "a", "b", "c"), Counter({"a": 3, "b": 1}))
    assert [b.owner for b in order] == ["c", "b", "a", "a"]


def test_a_key_over_its_share_gives_way_only_when_another_key_waits() -> None:
    feeding: Counter[str | None] = Counter({"a": 4})
    assert not over_share("a", feeding, frozenset(), feeders=4)
    assert not over_share("a", feeding, frozenset({"a"}), feeders=4)
    assert over_share("a", feeding, frozenset({"b"}), feeders=4)
    # At its even share (two keys, four feeders: two each) it keeps its feeders.
    assert not over_share("a", Counter({"a": 2, "b": 1}), frozenset({"b"}), feeders=4)
    # More keys than feeders: every key keeps one.
    assert not over_share("a", Counter({"a": 1}), frozenset({"b", "c", "d"}), feeders=2)


def test_between_equally_fed_keys_the_one_fed_longest_ago_goes_first() -> None:
    order = fair_order(waiting("a", "b"), Counter(), {"a": 20.0, "b": 10.0})
    assert [b.owner for b in order] == ["b", "a"]
    # A key never fed goes before both.
    order = fair_order(waiting("a", "b", "c"), Counter(), {"a": 20.0, "b": 10.0})
    assert [b.owner for b in order] == ["c", "b", "a"]
