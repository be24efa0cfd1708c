from __future__ import annotations

from pathlib import Path

import pytest

from schemas.errors import ConfigError
from schemas.prompt_registry import PromptCatalog, PromptRegistry, UnknownPrompt
from schemas.queues import Tier
from workers.prefix import PrefixCacheStats


def write(folder: Path, name: str, text: str) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / name).write_text(text)


def test_the_bundled_support_prompt_is_registered_for_every_tier() -> None:
    registry = PromptRegistry.load()
    prompt = registry.resolve("support")
    assert prompt.ref == "support@1"
    assert len(prompt.text) > 8000  # about 2,000 tokens of policy
    for tier in Tier:
        assert prompt in registry.for_tier(tier)


def test_names_resolve_to_the_newest_version_unless_pinned(tmp_path: Path) -> None:
    write(tmp_path, "faq@1.txt", "old")
    write(tmp_path, "faq@2.txt", "new\n")
    registry = PromptRegistry.load(tmp_path)
    assert registry.resolve("faq").text == "new"
    assert registry.resolve("faq@1").text == "old"
    with pytest.raises(UnknownPrompt, match="'faq@3'"):
        registry.resolve("faq@3")
    with pytest.raises(
        UnknownPrompt, match="registered: faq@1, faq@2, summarize@1, support-verbose@1, support@1"
    ):
        registry.resolve("nope")


def test_a_tier_folder_limits_a_prompt_to_that_tier(tmp_path: Path) -> None:
    write(tmp_path / "large", "legal@1.txt", "Think carefully.")
    registry = PromptRegistry.load(tmp_path)
    assert registry.resolve("legal", tier=Tier.LARGE).ref == "legal@1"
    with pytest.raises(UnknownPrompt, match="for the small tier"):
        registry.resolve("legal", tier=Tier.SMALL)
    assert [p.ref for p in registry.for_tier(Tier.SMALL)] == [
        "summarize@1",
        "support-verbose@1",
        "support@1",
    ]


def test_a_lazy_prompt_serves_every_tier_but_is_not_prefilled(tmp_path: Path) -> None:
    write(tmp_path / "lazy", "manual@1.txt", "A long, rarely used manual.")
    registry = PromptRegistry.load(tmp_path)
    manual = registry.resolve("manual")
    for tier in Tier:
        assert manual in registry.for_tier(tier)
        assert manual not in registry.to_prefill(tier)
    # The bundled demo of a bloated prompt is lazy too: no worker start pays for it.
    assert [p.ref for p in registry.to_prefill(Tier.SMALL)] == ["summarize@1", "support@1"]


@pytest.mark.parametrize(
    ("files", "problem"),
    [
        ({"Bad Name.txt": "x"}, "not named"),
        ({"empty@1.txt": "  \n"}, "is empty"),
        ({"support@1.txt": "a different text"}, "defined twice"),
    ],
)
def test_broken_prompt_folders_are_config_errors(
    tmp_path: Path, files: dict[str, str], problem: str
) -> None:
    for name, text in files.items():
        write(tmp_path, name, text)
    with pytest.raises(ConfigError, match=problem):
        PromptRegistry.load(tmp_path)


def test_the_catalog_notices_a_new_version(tmp_path: Path) -> None:
    write(tmp_path, "faq@1.txt", "one")
    catalog = PromptCatalog(tmp_path)
    assert not catalog.reload()
    write(tmp_path, "faq@2.txt", "two")
    assert catalog.reload()
    assert catalog.registry.resolve("faq").version == 2


def test_prefix_stats_count_hits_and_flag_evictions() -> None:
    stats = PrefixCacheStats()
    stats.set_prefixes({"support@1": 1000})
    assert stats.record(prompt_tokens=1010, cached_tokens=992, system_prompt="support@1")
    assert not stats.eviction_suspected.is_set()
    assert not stats.record(prompt_tokens=1010, cached_tokens=0, system_prompt="support@1")
    assert stats.eviction_suspected.is_set()
    assert not stats.record(prompt_tokens=10, cached_tokens=0, system_prompt=None)
    snapshot = stats.snapshot()
    assert snapshot["system_prompt_requests"] == 2
    assert snapshot["system_prompt_hits"] == 1
    assert snapshot["system_prompt_hit_rate"] == 0.5
    assert snapshot["prompt_tokens_total"] == 2030
    stats.set_prefixes({"support@1": 1000})
    assert not stats.eviction_suspected.is_set()
