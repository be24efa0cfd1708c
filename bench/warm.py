"""``llmq bench warm``: a cold engine's first token against a warmed worker's."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from typing import Any, TypeVar

from bench.harness import (
    bench_rig,
    counted,
    engine_only,
    engine_ttft_ms,
    queued_sample,
    rounded,
    step,
)
from schemas.percentiles import median
from schemas.prompt_registry import PromptRegistry
from schemas.queues import Tier
from schemas.settings import Settings
from workers.prefix import HIT_SHARE

QUESTIONS = (
    "Where is my order? It was supposed to arrive yesterday.",
    "Can I return hiking boots I wore once?",
    "How long does express shipping take to Canada?",
    "I was charged twice for the same order.",
    "How do I reset my password?",
    "Do you ship to a post office box?",
    "My tent zip broke after three years.",
    "When will my refund show up on my card?",
    "Can I change the address on my order?",
    "How many points do I have and when do they expire?",
    "Is the return label free in Germany?",
    "My parcel says delivered but it is not here.",
    "Can I combine two discount codes?",
    "What does Summit membership give me?",
    "The jacket I bought last week is now cheaper.",
    "I want to delete my account.",
    "Can I exchange my shoes for a bigger size?",
    "Do you sell gas canisters?",
    "I need to talk to a human.",
    "How much is standard shipping on a 40 dollar order?",
    "Can I cancel my order? It says processing.",
)


LOGPROBS_REQUESTS = 6
"""The first request asking for log probabilities, and five more to compare it with."""

IDLE_BEFORE_EACH_S = 1.5
"""How long the host idles before each measured request, the first included.

The first request after warm-up always comes after idle (the wait for the worker's
warm signal), and on a small shared host a request after idle is slower than one sent
right behind another, whatever served it (its processes' cores and caches cool down):
a first request against back-to-back ones would measure the idle, not warm-up left
undone. So every request waits the same before it starts."""

Sample = TypeVar("Sample")


def after_equal_idle(
    take: Callable[[str], Sample],
    questions: Sequence[str],
    *,
    label: str,
    idle_s: float = IDLE_BEFORE_EACH_S,
    sleep: Callable[[float], None] = time.sleep,
) -> list[Sample]:
    """``take`` of each question in order, each after ``idle_s`` of nothing running."""
    samples = []
    for question in counted(label, len(questions)).track(questions):
        sleep(idle_s)
        samples.append(take(question))
    return samples


def run_warm(settings: Settings, *, tier: Tier, max_tokens: int, prompt: str) -> dict[str, Any]:
    """Warm: a request with the system prompt through the queue to a worker that has
    warmed up and prefilled the prompt, then 20 more with other questions.

    Cold: then, with the worker stopped (one engine at a time), a fresh engine in this
    process (no warm-up) serves the first request. Same model, same prompt, one run.

    Between the two, the warm worker's first requests asking for log probabilities
    (``first_logprobs_penalty``: the first of them over the next five's p50). Every
    warm request starts after the same idle (``IDLE_BEFORE_EACH_S``).
    """
    system = PromptRegistry.load(settings.prompts_dir).resolve(prompt, tier=tier)

    def request(question: str, **extra: object) -> dict[str, object]:
        return {
            "messages": [{"role": "user", "content": question}],
            "system_prompt": system.ref,
            "max_tokens": max_tokens,
            "temperature": 0.0,
            **extra,
        }

    with bench_rig(settings, tier) as rig:
        samples = after_equal_idle(
            lambda question: queued_sample(rig, request(question)),
            QUESTIONS,
            label="warm: queued requests",
        )
        # Then the worker's first requests asking for log probabilities: a path of the
        # engine of its own, with a one-time cost of its own.
        with_logprobs = after_equal_idle(
            lambda question: queued_sample(rig, request(question, sampling={"logprobs": 2}))[0],
            QUESTIONS[:LOGPROBS_REQUESTS],
            label="warm: with log probabilities",
        )
    with engine_only(settings, tier, fresh=True) as engine:
        first_messages = [
            {"role": "system", "content": system.text},
            {"role": "user", "content": QUESTIONS[0]},
        ]
        with step("cold: first request on the fresh engine"):
            cold = engine_ttft_ms(engine, "cold-first", max_tokens, first_messages)
        prefix_tokens = len(engine.render_chat([{"role": "system", "content": system.text}]))
    warm_first = samples[0][0]
    rest = median(ttft for ttft, _ in samples[1:])
    hits = sum(1 for _, r in samples if r.usage.cached_prompt_tokens >= HIT_SHARE * prefix_tokens)
    return {
        "bench": "warm",
        "tier": tier.value,
        "system_prompt": system.ref,
        "prompt_tokens_first": samples[0][1].usage.prompt_tokens,
        "cold_ttft_ms": rounded(cold),
        "warm_ttft_ms": rounded(warm_first),
        "ratio": round(cold / warm_first, 2),
        "next_20_ttft_ms_p50": rounded(rest),
        "first_penalty": round(warm_first / rest, 3),
        "first_logprobs_ttft_ms": rounded(with_logprobs[0]),
        "next_logprobs_ttft_ms_p50": rounded(median(with_logprobs[1:])),
        "first_logprobs_penalty": round(with_logprobs[0] / median(with_logprobs[1:]), 3),
        "idle_before_each_s": IDLE_BEFORE_EACH_S,
        "prefix_cache_hits": hits,
        "requests": len(samples),
        "cached_prompt_tokens_first": samples[0][1].usage.cached_prompt_tokens,
        "system_prompt_tokens": prefix_tokens,
    }
