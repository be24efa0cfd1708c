"""Prompt tools: pins, lint findings with their token costs, compression, registration,
and the rule that nothing is promoted without a passing gate."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

import pytest
from sqlalchemy import create_engine, insert

from producer.limits import count_text_tokens, tokenizer_file
from producer.prompts import cli as prompts_cli
from producer.prompts.compress import compress, unified_diff
from producer.prompts.embed import Embedder, load_embedder
from producer.prompts.lint import TokenCounter, analyse, strip_fillers
from producer.prompts.parse import parse, render
from producer.prompts.store import register_version, write_pin
from producer.prompts.usage import prompt_usage
from schemas.errors import ConfigError
from schemas.prompt_registry import PromptRegistry
from schemas.queues import Tier
from schemas.settings import Settings
from schemas.tables import Base, Job

PLANTED = """You are Max, the support assistant of Acme Bikes.

# Rules

- Never ask the customer for their password or their card number.
- Always reply in a calm and friendly tone.
- Always add a cheerful emoji at the end of every reply.
- Do not share the customer's data with anyone else.
- Never use emojis in your replies.

# Payments

- Refunds take 5 business days to reach the card.
- Please never request the customer's password or card number in the chat.
- Bikes can be returned within 30 days if unused.
- You must never ask for a customer's card number or password.
"""


@pytest.fixture(scope="module")
def embed() -> Embedder:
    return load_embedder()


@pytest.fixture(scope="module")
def count() -> TokenCounter:
    path = tokenizer_file(Settings(), Tier.SMALL)
    return lambda text: count_text_tokens(text, path)


def shipped() -> str:
    return PromptRegistry.load().resolve("support-verbose@1").text


def test_the_shipped_verbose_prompt_is_about_2800_tokens(count: TokenCounter) -> None:
    assert 2500 <= count(shipped()) <= 3100


def test_parse_and_render_round_trip_the_shipped_prompt() -> None:
    document = parse(shipped())
    assert render(document) == shipped()
    assert len(document.examples()) == 13


def test_lint_finds_planted_duplicates_and_contradictions_with_their_costs(
    embed: Embedder, count: TokenCounter
) -> None:
    _, analysis = analyse(PLANTED, count=count, embed=embed)
    duplicates = [f for f in analysis.findings if f.kind == "duplicate"]
    assert len(duplicates) == 1
    (dup,) = duplicates
    assert dup.lines == (5, 14, 16)
    assert "said 3 times" in dup.summary
    # The cost is what removing the two extra wordings saves (the fullest one stays).
    keeper = max(dup.texts, key=len)
    assert dup.tokens == sum(count(t) for t in dup.texts) - count(keeper)
    contradictions = [f for f in analysis.findings if f.kind == "contradiction"]
    assert [f.lines for f in contradictions] == [(7, 9)]
    assert contradictions[0].tokens == count(contradictions[0].texts[0]) + count(
        contradictions[0].texts[1]
    )
    # Distinct rules are not flagged: refunds, returns, data sharing.
    flagged = {line for f in analysis.findings for line in f.lines}
    assert not flagged & {8, 13, 15}


def test_lint_threshold_is_configurable(embed: Embedder, count: TokenCounter) -> None:
    from producer.prompts.lint import LintOptions

    _, strict = analyse(
        PLANTED, count=count, embed=embed, options=LintOptions(duplicate_threshold=0.99)
    )
    assert not [f for f in strict.findings if f.kind == "duplicate"]


def test_lint_reports_examples_format_and_boilerplate_of_the_shipped_prompt(
    embed: Embedder, count: TokenCounter
) -> None:
    _, analysis = analyse(shipped(), count=count, embed=embed)
    kinds = {f.kind for f in analysis.findings}
    assert {"duplicate", "contradiction", "examples", "format", "boilerplate"} <= kinds
    examples = next(f for f in analysis.findings if f.kind == "examples")
    assert examples.summary.startswith("13 few-shot examples")
    assert all(f.tokens >= 0 for f in analysis.findings)
    assert analysis.removable_tokens > 0.3 * analysis.total_tokens


def test_numbers_that_differ_are_a_contradiction_not_a_duplicate(
    embed: Embedder, count: TokenCounter
) -> None:
    text = "- Returns are accepted within 30 days.\n- Returns are accepted within 60 days.\n"
    _, analysis = analyse(text, count=count, embed=embed)
    assert [f.kind for f in analysis.findings] == ["contradiction"]
    assert "different numbers" in analysis.findings[0].summary


def test_fillers_are_stripped() -> None:
    assert strip_fillers("Please make sure to always lead with the answer.") == (
        "Always lead with the answer."
    )
    assert strip_fillers("Be polite at all times.") == "Be polite."


def test_compress_makes_the_shipped_prompt_at_least_half_as_long(
    embed: Embedder, count: TokenCounter, tmp_path: Path
) -> None:
    original = count(shipped())
    result = compress(
        shipped(), count=count, embed=embed, target_tokens=original // 2, keep_examples=3
    )
    assert result.tokens <= original / 2
    text = result.text
    # Facts with figures survive; one wording of each duplicate survives.
    for fact in ("14.95", "60 days", "4.95", "8 am to 8 pm", "18 months"):
        assert fact in text
    assert text.count("card number") == 1
    assert "You are a helpful assistant." not in text
    assert text.count("Customer:") == 3
    assert "Example 13" not in text and "Example 3:" in text
    # Registered, it is a valid prompt version; the bare name still resolves to @1.
    registry = PromptRegistry.load(tmp_path)
    new = register_version(tmp_path, registry, registry.resolve("support-verbose"), text)
    assert new.ref == "support-verbose@2"
    reloaded = PromptRegistry.load(tmp_path)
    assert reloaded.resolve("support-verbose@2").text == text.rstrip("\n")
    assert reloaded.resolve("support-verbose").ref == "support-verbose@1"
    assert "+Example 3:" in unified_diff(shipped(), text, before_name="a", after_name="b")


def test_a_pin_decides_what_a_bare_name_resolves_to(tmp_path: Path) -> None:
    (tmp_path / "faq@1.txt").write_text("one")
    (tmp_path / "faq@2.txt").write_text("two")
    assert PromptRegistry.load(tmp_path).resolve("faq").ref == "faq@2"
    before = PromptRegistry.load(tmp_path).fingerprint()
    write_pin(tmp_path, "faq", 1)
    registry = PromptRegistry.load(tmp_path)
    assert registry.resolve("faq").ref == "faq@1"
    assert registry.resolve("faq@2").ref == "faq@2"
    assert registry.fingerprint() != before
    write_pin(tmp_path, "faq", 7)
    with pytest.raises(ConfigError, match="faq@7, which is not registered"):
        PromptRegistry.load(tmp_path)
    (tmp_path / "faq.pin").write_text("latest")
    with pytest.raises(ConfigError, match="version number"):
        PromptRegistry.load(tmp_path)


def compress_args(**overrides: Any) -> argparse.Namespace:
    values: dict[str, Any] = {
        "prompt": "support-verbose",
        "tier": None,
        "threshold": 0.75,
        "contradiction_threshold": 0.55,
        "keep_examples": 3,
        "target_tokens": None,
        "no_diff": True,
        "cases": None,
        "tag": "customer-service",
        "n": 10,
        "gate_threshold": 3.0,
        "no_gate": False,
        "promote": False,
        "json": True,
    }
    return argparse.Namespace(**(values | overrides))


@pytest.mark.parametrize(
    "case",
    [
        ("fail", True, "support-verbose@1"),
        ("inconclusive", True, "support-verbose@1"),
        ("pass", False, "support-verbose@1"),
        ("pass", True, "support-verbose@2"),
    ],
)
def test_only_a_passing_gate_with_promote_changes_what_the_name_resolves_to(
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
    tmp_path: Path,
    case: tuple[str, bool, str],
) -> None:
    verdict, promote, resolves = case
    monkeypatch.setenv("LLMQ_PROMPTS_DIR", str(tmp_path))
    monkeypatch.setattr(prompts_cli, "_gate", lambda *a, **k: {"verdict": verdict})
    assert prompts_cli._compress(compress_args(promote=promote)) == 0
    summary = json.loads(capsys.readouterr().out.strip().splitlines()[-1])
    assert summary["compressed"] == "support-verbose@2"
    assert summary["verdict"] == verdict
    assert summary["promoted"] is (resolves == "support-verbose@2")
    assert PromptRegistry.load(tmp_path).resolve("support-verbose").ref == resolves


def test_without_a_gate_nothing_is_promoted(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    monkeypatch.setenv("LLMQ_PROMPTS_DIR", str(tmp_path))
    assert prompts_cli._compress(compress_args(no_gate=True, promote=True)) == 0
    assert json.loads(capsys.readouterr().out.strip())["promoted"] is False
    assert PromptRegistry.load(tmp_path).resolve("support-verbose").ref == "support-verbose@1"


def test_compress_needs_a_prompts_folder(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMQ_PROMPTS_DIR", raising=False)
    with pytest.raises(ConfigError, match="LLMQ_PROMPTS_DIR"):
        prompts_cli._compress(compress_args(no_gate=True))


def test_lint_json(monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]) -> None:
    args = argparse.Namespace(
        prompt="support-verbose@1",
        tier=None,
        threshold=0.75,
        contradiction_threshold=0.55,
        keep_examples=3,
        json=True,
    )
    assert prompts_cli._lint(args) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["prompt"] == "support-verbose@1"
    assert report["removable_tokens"] > 0
    assert {f["kind"] for f in report["findings"]} >= {"duplicate", "contradiction"}


def test_prefix_cache_hit_rate_comes_from_job_rows(tmp_path: Path) -> None:
    engine = create_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    Base.metadata.create_all(engine)
    rows = [
        ("support@1", 2160, 2144),
        ("support@1", 2160, 2144),
        ("support@1", 2160, 0),
        ("faq@1", 100, 96),
        (None, 50, 0),
    ]
    with engine.begin() as connection:
        for number, (ref, prompt_tokens, cached) in enumerate(rows):
            request: dict[str, Any] = {"messages": [{"role": "user", "content": "hi"}]}
            if ref:
                request["system_prompt"] = ref
            connection.execute(
                insert(Job).values(
                    id=f"job{number}",
                    tier="small",
                    priority="interactive",
                    routing={},
                    status="succeeded",
                    request=request,
                    prompt_tokens=prompt_tokens,
                    cached_prompt_tokens=cached,
                )
            )
    usage = prompt_usage(engine, {"support@1": 2159, "faq@1": 90})
    assert usage["support@1"].jobs == 3
    assert usage["support@1"].hits == 2
    assert usage["faq@1"].hit_rate == 1.0
    assert set(usage) == {"support@1", "faq@1"}
