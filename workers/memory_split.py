"""Sharing one host's memory between the engines of several tiers (``llmq up --tiers``).

Each engine sizes its KV cache from its tier's settings as if it were alone: on a GPU a
share of the device (``gpu_memory_utilization``), on a CPU a fixed amount
(``kv_cache_memory_gb``). Several engines on one host must split that, or the second
one refuses to start (GPU) or the host swaps (CPU).
"""

from __future__ import annotations

from collections.abc import Sequence

from schemas.errors import ConfigError
from schemas.queues import Tier
from schemas.settings import TierConfig

GPU_SHARE_TOTAL = 0.9
"""The share of one device all engines together may take (vLLM's own default for one)."""
HOST_MEMORY_SHARE = 0.5
"""The share of the host's available memory all CPU KV caches together may take: the
rest holds the weights, the engines' processes and everything else on the host."""
MIN_KV_CACHE_GB = 0.25
"""Below this an engine holds too few sequences to be worth starting."""


def split_memory(
    tiers: Sequence[Tier],
    configs: dict[Tier, TierConfig],
    *,
    on_cpu: bool,
    cpu_default_kv_gb: float,
    available_gb: float,
) -> dict[Tier, TierConfig]:
    """Each tier's config with its memory cut to its share of the host; unchanged alone.

    On a GPU each engine takes at most ``GPU_SHARE_TOTAL / len(tiers)`` of the device;
    on a CPU each KV cache at most ``HOST_MEMORY_SHARE * available_gb / len(tiers)``.
    A tier asking for less keeps its own figure. Raises ``ConfigError`` when a CPU
    engine's share would be under ``MIN_KV_CACHE_GB``.
    """
    if len(set(tiers)) != len(tiers):
        raise ConfigError("each tier may be named once")
    if len(tiers) <= 1:
        return {tier: configs[tier] for tier in tiers}
    count = len(tiers)
    split: dict[Tier, TierConfig] = {}
    for tier in tiers:
        config = configs[tier]
        if not on_cpu:
            share = min(config.gpu_memory_utilization, GPU_SHARE_TOTAL / count)
            split[tier] = config.model_copy(update={"gpu_memory_utilization": share})
            continue
        wanted = config.kv_cache_memory_gb or cpu_default_kv_gb
        share_gb = min(wanted, HOST_MEMORY_SHARE * available_gb / count)
        if share_gb < MIN_KV_CACHE_GB:
            raise ConfigError(
                f"{available_gb:.1f} GiB of available memory is too little for {count} "
                f"engines (each needs a KV cache of at least {MIN_KV_CACHE_GB} GiB); "
                "serve fewer tiers"
            )
        split[tier] = config.model_copy(update={"kv_cache_memory_gb": round(share_gb, 3)})
    return split


def parse_tiers(text: str, configured: Sequence[Tier]) -> list[Tier]:
    """``small,large`` or ``all`` (every configured tier that is not a variant), in the
    order given; raises ``ConfigError`` naming a tier that is unknown or not configured."""
    if text.strip() == "all":
        return [tier for tier in Tier if tier in configured]
    tiers: list[Tier] = []
    for name in (part.strip() for part in text.split(",")):
        if not name:
            continue
        try:
            tier = Tier(name)
        except ValueError:
            raise ConfigError(
                f"no tier {name!r} (use small, medium, large, embed or all)"
            ) from None
        if tier not in configured and tier != Tier.EMBED:  # the embedding tier has no engine
            known = ", ".join(sorted(str(t) for t in configured))
            raise ConfigError(f"no tier {tier} is configured (configured: {known})")
        if tier in tiers:
            raise ConfigError(f"tier {tier} is named twice")
        tiers.append(tier)
    if not tiers:
        raise ConfigError("name at least one tier (small, medium, large) or all")
    return tiers
