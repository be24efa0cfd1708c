"""``llmq up --tiers``: which tiers, and each engine's share of the host's memory."""

from __future__ import annotations

from pathlib import Path

import pytest

from schemas.errors import ConfigError
from schemas.queues import Tier
from schemas.settings import Settings, TierConfig
from workers.memory_split import MIN_KV_CACHE_GB, parse_tiers, split_memory

CONFIGURED = [Tier.SMALL, Tier.MEDIUM, Tier.LARGE, Tier("small@bf16")]


def test_parse_tiers_keeps_the_order_given() -> None:
    assert parse_tiers("large, small", CONFIGURED) == [Tier.LARGE, Tier.SMALL]


def test_all_is_every_configured_base_tier_smallest_first() -> None:
    assert parse_tiers("all", [Tier.LARGE, Tier.SMALL, Tier("small@bf16")]) == [
        Tier.SMALL,
        Tier.LARGE,
    ]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("tiny", "no tier 'tiny'"),
        ("small,small", "named twice"),
        (" , ", "at least one tier"),
        ("medium", "no tier medium is configured"),
    ],
)
def test_bad_tier_lists_name_the_problem(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_tiers(text, [Tier.SMALL, Tier.LARGE])


def _configs() -> dict[Tier, TierConfig]:
    return dict(Settings().tiers)


def test_one_tier_keeps_its_own_settings() -> None:
    configs = _configs()
    split = split_memory(
        [Tier.SMALL], configs, on_cpu=True, cpu_default_kv_gb=2.0, available_gb=1.0
    )
    assert split == {Tier.SMALL: configs[Tier.SMALL]}


def test_cpu_engines_share_half_the_available_memory() -> None:
    split = split_memory(
        [Tier.SMALL, Tier.LARGE], _configs(), on_cpu=True, cpu_default_kv_gb=2.0, available_gb=4.0
    )
    assert [split[t].kv_cache_memory_gb for t in (Tier.SMALL, Tier.LARGE)] == [1.0, 1.0]


def test_a_roomy_host_keeps_each_engines_own_kv_cache() -> None:
    configs = _configs()
    configs[Tier.LARGE] = configs[Tier.LARGE].model_copy(update={"kv_cache_memory_gb": 0.5})
    split = split_memory(
        [Tier.SMALL, Tier.LARGE], configs, on_cpu=True, cpu_default_kv_gb=2.0, available_gb=20.0
    )
    assert split[Tier.SMALL].kv_cache_memory_gb == 2.0
    assert split[Tier.LARGE].kv_cache_memory_gb == 0.5


def test_gpu_engines_split_the_device() -> None:
    split = split_memory(
        list(Tier), _configs(), on_cpu=False, cpu_default_kv_gb=2.0, available_gb=1.0
    )
    shares = [config.gpu_memory_utilization for config in split.values()]
    assert shares == [pytest.approx(0.3)] * 3
    assert sum(shares) <= 0.9 + 1e-9


def test_too_little_memory_is_refused_before_any_engine_starts() -> None:
    available = 3 * MIN_KV_CACHE_GB  # half of it split three ways is under the minimum
    with pytest.raises(ConfigError, match="too little for 3 engines"):
        split_memory(
            list(Tier), _configs(), on_cpu=True, cpu_default_kv_gb=2.0, available_gb=available
        )


def test_the_workers_read_the_split_tier_table(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from workers import up

    monkeypatch.setattr("workers.engine.vllm.running_on_cpu", lambda: True)
    settings = Settings(model_cache_dir=tmp_path)
    env = up._split_env(settings, [Tier.SMALL, Tier.LARGE])
    assert env is not None
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    seen = Settings.from_env()
    shares = {t: seen.tier(t).kv_cache_memory_gb for t in (Tier.SMALL, Tier.LARGE)}
    assert all(share is not None and MIN_KV_CACHE_GB <= share <= 2.0 for share in shares.values())
    # The tiers not served keep their settings; the models stay the configured ones.
    assert seen.tier(Tier.MEDIUM) == settings.tier(Tier.MEDIUM)
    assert seen.tier(Tier.LARGE).model == settings.tier(Tier.LARGE).model


def test_a_single_tier_needs_no_table(tmp_path: Path) -> None:
    from workers import up

    assert up._split_env(Settings(model_cache_dir=tmp_path), [Tier.SMALL]) is None


def test_llmq_up_names_an_unknown_tier_in_one_line(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    from producer import cli

    monkeypatch.delenv("LLMQ_TIERS_FILE", raising=False)
    assert cli.main(["up", "--tiers", "small,tiny"]) == 1
    assert capsys.readouterr().err == (
        "llmq: error: no tier 'tiny' (use small, medium, large, embed or all)\n"
    )
