"""The A/B quality gate between two versions of a system prompt.

Scoring rules, paired statistics and the verdict are the quality gate's
(:mod:`producer.quality`); this module only sends each case twice through the real
queue path, once under each prompt version, on the same tier, greedy, and pairs the
scores. Both versions' jobs are submitted together so the worker batches them.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

from producer.client import Client
from producer.quality.cases import Case
from producer.quality.scoring import score
from producer.quality.stats import GateResult, PairedResult, paired_gate
from producer.status import live_workers
from schemas.errors import LlmqError
from schemas.queues import Priority, Tier

DEFAULT_MAX_TOKENS = 48
# Not a setting: the default of the prompt gate's own timeout_s parameter.
# How long a new version may take to reach every warm worker (its keep-warm loop
# re-reads the folder every few seconds, then prefills the prompt).
PREFILL_WAIT_S = 180.0

# ``(done, total)`` after each case; a ``schemas.progress.ProgressBar`` is one.
Progress = Callable[[int, int], None]


class GateUnavailable(LlmqError):
    """The gate cannot run: no warm worker serves the tier, or one never saw the prompt."""


@dataclass(frozen=True)
class PromptGate:
    a_ref: str
    b_ref: str
    result: GateResult
    a_ttft_ms: list[float]
    b_ttft_ms: list[float]

    def to_dict(self) -> dict[str, Any]:
        return {"a": self.a_ref, "b": self.b_ref, **self.result.model_dump(mode="json")}


def wait_for_prompts(
    client: Client, tier: Tier, refs: Sequence[str], *, timeout_s: float = PREFILL_WAIT_S
) -> None:
    """Return once ``client`` and every warm worker of ``tier`` know and prefilled ``refs``
    (those a worker prefills; a lazy prompt is cached by its first request).

    A job naming a version a worker has not loaded yet would fail there. Raises
    ``GateUnavailable`` when no worker is warm or the versions never show up.
    """
    client.reload_prompts()  # this producer must know the versions too
    # A lazy prompt (schemas.prompt_registry) is cached by its first request instead.
    refs = [ref for ref in refs if client.prompts.resolve(ref, tier=tier).prefill]
    deadline = time.monotonic() + timeout_s
    while True:
        warm = [w for w in live_workers(client.redis) if w.tier is tier and w.warm]
        if warm and all(set(refs) <= set(w.prefilled_prompts) for w in warm):
            return
        if time.monotonic() > deadline:
            if not warm:
                raise GateUnavailable(f"no warm worker serves the {tier} tier: start one first")
            raise GateUnavailable(
                f"the {tier} workers did not load {', '.join(refs)} within {timeout_s:.0f} s"
            )
        time.sleep(1.0)


def run_prompt_gate(
    client: Client,
    *,
    a_ref: str,
    b_ref: str,
    cases: Sequence[Case],
    tier: Tier,
    threshold_points: float,
    max_tokens: int = DEFAULT_MAX_TOKENS,
    timeout_s: float = 1800.0,
    progress: Progress | None = None,
) -> PromptGate:
    """Answer every case under both prompt versions and give the paired verdict."""
    handles = []
    for case in cases:
        for ref in (a_ref, b_ref):
            request = {
                "messages": case.chat(),
                "system_prompt": ref,
                "max_tokens": case.max_tokens or max_tokens,
                "temperature": 0.0,
            }
            handles.append(client.submit(request, tier=tier, priority=Priority.BATCH))
    deadline = time.monotonic() + timeout_s
    pairs: list[PairedResult] = []
    ttfts: tuple[list[float], list[float]] = ([], [])
    for index, case in enumerate(cases):
        scores = []
        for side, handle in enumerate(handles[2 * index : 2 * index + 2]):
            result = handle.result(timeout=max(1.0, deadline - time.monotonic()))
            scores.append(score(case, result.text))
            if result.timings.ttft_ms is not None:
                ttfts[side].append(result.timings.ttft_ms)
        pairs.append(PairedResult(case.id, scores[0], scores[1]))
        if progress is not None:
            progress(index + 1, len(cases))
    return PromptGate(a_ref, b_ref, paired_gate(pairs, threshold_points=threshold_points), *ttfts)
