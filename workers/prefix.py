"""Prefix-cache figures, from the engine's own per-request count of cached prompt tokens."""

from __future__ import annotations

import threading
from typing import Any

# A request whose cached tokens cover this share of its system prompt's prefix is a hit;
# the last partial block of a prefix is never cached, so a hit is never exactly 100%.
HIT_SHARE = 0.9


class PrefixCacheStats:
    """Running totals of prompt and cached tokens, and hits on registered system prompts."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self.prefix_tokens: dict[str, int] = {}
        self.prompt_tokens = 0
        self.cached_tokens = 0
        self.system_prompt_requests = 0
        self.system_prompt_hits = 0
        self.eviction_suspected = threading.Event()

    def set_prefixes(self, prefix_tokens: dict[str, int]) -> None:
        """Token length of each registered prompt's prefix, as the worker renders it."""
        with self._lock:
            self.prefix_tokens = dict(prefix_tokens)
        self.eviction_suspected.clear()

    def record(self, *, prompt_tokens: int, cached_tokens: int, system_prompt: str | None) -> bool:
        """Count one finished prefill; return whether its system prompt came from the cache."""
        with self._lock:
            self.prompt_tokens += prompt_tokens
            self.cached_tokens += cached_tokens
            prefix = self.prefix_tokens.get(system_prompt or "")
            if not prefix:
                return False
            self.system_prompt_requests += 1
            hit = cached_tokens >= HIT_SHARE * prefix
            self.system_prompt_hits += int(hit)
        if not hit:
            # A registered prefix missed: it was evicted, so the keep-warm loop refills it.
            self.eviction_suspected.set()
        return hit

    def snapshot(self) -> dict[str, Any]:
        """Totals and hit rates, for the worker's registry entry and its metrics."""
        with self._lock:
            requests = self.system_prompt_requests
            return {
                "prompt_tokens_total": self.prompt_tokens,
                "cached_prompt_tokens_total": self.cached_tokens,
                "token_hit_rate": _ratio(self.cached_tokens, self.prompt_tokens),
                "system_prompt_requests": requests,
                "system_prompt_hits": self.system_prompt_hits,
                "system_prompt_hit_rate": _ratio(self.system_prompt_hits, requests),
                "prefilled_prompts": sorted(self.prefix_tokens),
            }


def _ratio(part: int, whole: int) -> float | None:
    return round(part / whole, 4) if whole else None
