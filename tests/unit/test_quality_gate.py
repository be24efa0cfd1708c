"""The A/B gate's core: each scoring rule, the case file format, the paired statistics."""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Sequence

import numpy as np
import numpy.typing as npt
import pytest

from bench.data.quality_cases import generate
from producer.quality import (
    BUNDLED_CASES,
    Case,
    PairedResult,
    Rule,
    load_cases,
    paired_gate,
    parse_cases,
    score,
)
from producer.quality.cases import BENCH_POOL, load_bench_pool
from producer.quality.scoring import chosen_option, first_json_object
from producer.quality.stats import mcnemar_exact, newcombe_paired, tango_paired, wilson
from schemas.errors import ConfigError


def case(rule: str, expected: object, **extra: object) -> Case:
    return Case.model_validate(
        {"id": "c", "prompt": "q", "rule": rule, "expected": expected, **extra}
    )


@pytest.mark.parametrize(
    ("answer", "right"),
    [
        ("12", True),
        (" 12. ", True),
        ("**12**", True),
        ("12\nbecause 7+5", True),
        ("The answer is 12", False),
        ("13", False),
        ("", False),
    ],
)
def test_exact(answer: str, right: bool) -> None:
    assert score(case("exact", "12"), answer) is right


def test_exact_ignores_case_and_spacing() -> None:
    assert score(case("exact", "Paris"), "  paris.") is True


@pytest.mark.parametrize(
    ("expected", "answer", "right"),
    [
        ("9 am", "We open at 9 AM on weekdays.", True),
        ("9 am", "We open at 10 am.", False),
        (["refund", "5 business days"], "Your refund arrives in 5  business days.", True),
        (["refund", "5 business days"], "Your refund arrives soon.", False),
    ],
)
def test_contains(expected: str | list[str], answer: str, right: bool) -> None:
    assert score(case("contains", expected), answer) is right


def test_regex() -> None:
    rule = case("regex", r"\b(?:42|forty[- ]two)\b")
    assert score(rule, "It is forty-two.") is True
    assert score(rule, "It is 420.") is False


@pytest.mark.parametrize(
    ("answer", "letter"),
    [
        ("B", "B"),
        ("(b) the second", "B"),
        ("Answer: C", "C"),
        ("The answer is D.", "D"),
        ("E) none", "E"),
        ("A plan at $19 a month", None),
        ("a: the first", "A"),
        ("I pick (c) here", "C"),
        ("I think so", None),
        ("", None),
    ],
)
def test_choice_letter(answer: str, letter: str | None) -> None:
    assert chosen_option(answer) == letter
    assert score(case("choice", "B"), answer) is (letter == "B")


def test_choice_by_option_text() -> None:
    assert score(case("choice", "Express shipping"), "express shipping is faster") is True


SCHEMA = {
    "type": "object",
    "properties": {"name": {"type": "string"}, "order": {"type": "integer"}},
    "required": ["name", "order"],
}


@pytest.mark.parametrize(
    ("answer", "right"),
    [
        ('{"name": "Ana", "order": 1182}', True),
        ('Sure! {"name": "Ana", "order": 1182} done', True),
        ('```json\n{"name": "Ana", "order": "1182"}\n```', False),
        ('{"name": "Ana"}', False),
        ("no json here {", False),
    ],
)
def test_json_schema(answer: str, right: bool) -> None:
    assert score(case("json_schema", SCHEMA), answer) is right


def test_first_json_object_skips_broken_braces() -> None:
    assert first_json_object('{oops} then {"a": 1}') == {"a": 1}


def fake_embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
    """Bag-of-letters vectors: texts sharing letters are similar, enough to test the rule."""
    rows = []
    for text in texts:
        vector = np.zeros(26, dtype=np.float32)
        for char in text.lower():
            if "a" <= char <= "z":
                vector[ord(char) - 97] += 1
        rows.append(vector / max(float(np.linalg.norm(vector)), 1e-6))
    return np.stack(rows)


def test_similarity_with_and_without_a_pass_mark() -> None:
    marked = case("similarity", "your parcel ships tomorrow", threshold=0.9)
    assert score(marked, "your parcel ships tomorrow", embed=fake_embed) is True
    assert score(marked, "xyz", embed=fake_embed) is False
    graded = case("similarity", "your parcel ships tomorrow", threshold=None)
    value = score(graded, "parcel", embed=fake_embed)
    assert isinstance(value, float) and 0 < value < 1
    assert score(graded, "", embed=fake_embed) == 0.0


def test_case_format_errors_name_the_line() -> None:
    good = json.dumps({"id": "a", "prompt": "p", "rule": "exact", "expected": "1"})
    with pytest.raises(ConfigError, match=r":2: not JSON"):
        parse_cases([good, "{"])
    with pytest.raises(ConfigError, match="duplicate case id"):
        parse_cases([good, good])
    with pytest.raises(ConfigError, match=r":1: rule"):
        parse_cases([json.dumps({"id": "a", "prompt": "p", "rule": "nope", "expected": "1"})])
    both = {"id": "a", "prompt": "p", "messages": [], "rule": "exact", "expected": "1"}
    with pytest.raises(ConfigError, match="exactly one"):
        parse_cases([json.dumps(both)])
    bad_regex = {"id": "a", "prompt": "p", "rule": "regex", "expected": "("}
    with pytest.raises(ConfigError, match="regular expression"):
        parse_cases([json.dumps(bad_regex)])


def test_bundled_cases() -> None:
    cases = load_cases(BUNDLED_CASES)
    assert len(cases) >= 300
    assert {c.rule for c in cases} == set(Rule)
    assert all(c.chat()[-1]["content"] for c in cases)


# The first 344 rows as earlier gates measured them (sha256 of those lines).
MEASURED_ROWS_SHA256 = "be7ec115b9dd78ce82d579fae878fd5102b82090e0c2e38d8d65e125d92510bb"


def test_the_bundled_file_is_what_the_generator_writes() -> None:
    lines = [json.dumps(row, ensure_ascii=False) for row in generate()]
    assert BUNDLED_CASES.read_text(encoding="utf-8") == "\n".join(lines) + "\n"


def test_rows_already_measured_never_change() -> None:
    lines = BUNDLED_CASES.read_text(encoding="utf-8").splitlines(keepends=True)
    measured = "".join(lines[:BENCH_POOL]).encode()
    assert hashlib.sha256(measured).hexdigest() == MEASURED_ROWS_SHA256
    assert [c.id for c in load_bench_pool()] == [c.id for c in load_cases()[:BENCH_POOL]]


def test_enough_distinct_customer_service_cases_for_the_prompt_gate() -> None:
    cases = load_cases()
    support = [c for c in cases if "customer-service" in c.tags]
    assert len(support) >= 450
    policy = [c for c in cases if c.id.startswith("policy-")]
    prompts = [c.prompt for c in policy]
    assert len(set(prompts)) == len(prompts)
    assert not set(prompts) & {c.prompt for c in cases if not c.id.startswith("policy-")}
    for item in policy:
        assert item.max_tokens == 24
        assert item.prompt is not None
        context = item.prompt.split("Answer the customer")[0]
        # The answer is stated exactly once, and the stated fact scores as right.
        if item.rule is Rule.REGEX:
            assert len(re.findall(item.expected, context, re.IGNORECASE)) == 1
        else:
            assert context.lower().count(item.expected.lower()) == 1
        fact = context.removeprefix("Store information: ").split("\n")[0]
        assert score(item, fact)


# Statistics.


def test_wilson_matches_the_textbook() -> None:
    interval = wilson(8, 10)
    assert interval.value == 0.8
    assert interval.low == pytest.approx(0.4902, abs=1e-3)
    assert interval.high == pytest.approx(0.9433, abs=1e-3)


@pytest.mark.parametrize("interval", [tango_paired, newcombe_paired])
def test_paired_intervals_cover_the_true_difference(interval: object) -> None:
    # Coverage by simulation: correlated pairs, n=40, true difference -0.1.
    rng = np.random.default_rng(7)
    probabilities = [0.5, 0.1, 0.2, 0.2]  # both, b_only, a_only, neither
    hits = 0
    trials = 2000
    for _ in range(trials):
        both, b_only, a_only, neither = rng.multinomial(40, probabilities)
        found = interval(int(both), int(b_only), int(a_only), int(neither))  # type: ignore[operator]
        assert found.low <= found.value <= found.high
        hits += found.low <= -0.1 <= found.high
    assert 0.93 <= hits / trials <= 0.985


def test_no_flips_still_leaves_room_for_a_flip_rate() -> None:
    # Tango: none of n flipped still allows about z^2 / (n + z^2) either way.
    for counts in [(10, 0, 0, 10), (20, 0, 0, 0), (0, 0, 0, 20)]:
        interval = tango_paired(*counts)
        assert interval.low == pytest.approx(-3.8415 / 23.8415, abs=1e-3)
        assert interval.high == pytest.approx(3.8415 / 23.8415, abs=1e-3)
    # Newcombe's interval collapses when every pair agrees: why the gate does not use it.
    assert newcombe_paired(10, 0, 0, 10).high - newcombe_paired(10, 0, 0, 10).low < 0.01


def test_tango_on_a_clear_loss() -> None:
    interval = tango_paired(5, 0, 15, 0)
    assert interval.value == -0.75
    assert -0.95 < interval.low < interval.high < -0.4


def test_mcnemar() -> None:
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(0, 10) == pytest.approx(2 / 1024)


def test_identical_variants_pass() -> None:
    scores = [i % 3 != 0 for i in range(200)]
    result = paired_gate([PairedResult(str(i), s, s) for i, s in enumerate(scores)])
    assert result.verdict == "pass"
    assert result.delta.value == 0
    assert result.flips.a_only == result.flips.b_only == 0
    assert result.a == result.b
    assert result.cases_needed is None


def test_identical_at_twenty_cases_need_more_cases_or_a_wider_threshold() -> None:
    pairs = [(i % 2 == 0, i % 2 == 0) for i in range(20)]
    small = paired_gate(pairs)
    assert small.verdict == "inconclusive"
    assert small.cases_needed is not None and 100 < small.cases_needed < 200
    assert paired_gate(pairs, threshold_points=20).verdict == "pass"


def test_clearly_worse_fails() -> None:
    pairs = [(True, i % 4 == 0) for i in range(20)]
    result = paired_gate(pairs)
    assert result.verdict == "fail"
    assert result.delta.high < -0.03
    assert result.flips.a_only == 15
    assert result.mcnemar_p is not None and result.mcnemar_p < 0.001


def test_small_n_is_inconclusive() -> None:
    result = paired_gate([(True, True), (True, False), (False, True), (True, True)])
    assert result.verdict == "inconclusive"
    assert result.cases_needed is not None and result.cases_needed >= 10


def test_inconclusive_says_how_many_cases_would_decide() -> None:
    pairs = [(True, True)] * 30 + [(True, False)] * 3 + [(False, True)] * 2 + [(False, False)] * 15
    result = paired_gate(pairs)
    assert result.verdict == "inconclusive"
    assert result.cases_needed is not None and result.cases_needed > 50


def test_threshold_is_configurable() -> None:
    pairs = [(True, True)] * 80 + [(True, False)] * 4 + [(False, False)] * 16
    assert paired_gate(pairs, threshold_points=20).verdict == "pass"
    assert paired_gate(pairs, threshold_points=0).verdict in ("fail", "inconclusive")


def test_graded_scores_use_the_paired_bootstrap() -> None:
    rng = np.random.default_rng(1)
    a = rng.uniform(0.4, 1.0, size=80)
    same = paired_gate([(float(x), float(x)) for x in a])
    assert same.method == "paired-bootstrap" and same.verdict == "pass"
    worse = paired_gate([(float(x), float(x) * 0.5) for x in a])
    assert worse.verdict == "fail"
    assert paired_gate([(float(x), float(x)) for x in a], seed=3).delta == same.delta


def test_bad_scores_are_refused() -> None:
    with pytest.raises(ValueError, match=r"\[0, 1\]"):
        paired_gate([(1.5, 1.0)])
