"""``llmq bench prompt``: a verbose system prompt against its compressed version.

Same worker, same run, one engine. The compressed text comes from ``llmq prompts
compress``'s pass and is registered in a scratch prompts folder as the next version.

* **Cold**: a prefix the engine has never seen, as after a new version or an eviction.
  Each sample sends the prompt's text as an inline system message behind a unique
  marker, so no block of it is cached; the two versions alternate.
* **Warm**: the registered versions by name, after one unmeasured request of each (a
  lazy prompt is cached by its first request), so every sample hits the prefix cache.
* **Quality**: the A/B gate on the shipped customer-service cases (every one by
  default), answered under each version through the queue; its paired verdict.
"""

from __future__ import annotations

import contextlib
import os
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from bench.harness import bench_rig, counted, queued_sample, rounded, step
from bench.warm import QUESTIONS
from producer.prompts.cli import DEFAULT_GATE_TAG, token_counter
from producer.prompts.compress import compress
from producer.prompts.embed import load_embedder
from producer.prompts.gate import run_prompt_gate, wait_for_prompts
from producer.prompts.store import register_version
from producer.quality.cases import load_cases
from schemas.errors import ConfigError
from schemas.percentiles import median
from schemas.progress import ProgressBar
from schemas.prompt_registry import PromptRegistry
from schemas.queues import Tier
from schemas.settings import Settings


def run_prompt(
    settings: Settings,
    *,
    tier: Tier,
    prompt: str,
    samples: int,
    cases: int | None,
    max_tokens: int,
    keep_examples: int,
    gate_threshold: float,
) -> dict[str, Any]:
    """Tokens, cold and warm TTFT and gated quality of a prompt and its compressed version.

    The gate answers the first ``cases`` shipped customer-service cases, every one when
    ``cases`` is None. Raises ``ConfigError`` when there are none.
    """
    import tempfile

    with tempfile.TemporaryDirectory(prefix="llmq-bench-prompts-") as scratch:
        folder = Path(scratch)
        if settings.prompts_dir is not None:  # keep the deployment's own prompts visible
            for path in settings.prompts_dir.expanduser().glob("*.txt"):
                (folder / path.name).write_text(path.read_text(encoding="utf-8"))
        registry = PromptRegistry.load(folder)
        original = registry.resolve(prompt, tier=tier)
        count = token_counter(settings, tier)
        original_tokens = count(original.text)
        with step(f"compressing {prompt} ({original_tokens} tokens)"):
            result = compress(
                original.text,
                count=count,
                embed=load_embedder(),
                target_tokens=original_tokens // 2,
                keep_examples=keep_examples,
            )
        compressed = register_version(folder, registry, original, result.text)
        gate_cases = [c for c in load_cases() if DEFAULT_GATE_TAG in c.tags][:cases]
        if not gate_cases:
            raise ConfigError("no customer-service cases in the bundled case file")
        settings = settings.model_copy(update={"prompts_dir": folder})
        with (
            _worker_env("LLMQ_PROMPTS_DIR", str(folder)),
            bench_rig(settings, tier, concurrency=8) as rig,
        ):
            with step("waiting for the worker to load both versions"):
                wait_for_prompts(rig.client, tier, [original.ref, compressed.ref])
            cold: dict[str, list[float]] = {original.ref: [], compressed.ref: []}
            warm: dict[str, list[float]] = {original.ref: [], compressed.ref: []}
            for index in counted("cold TTFT, both versions", samples, unit="pairs").track(
                range(samples)
            ):
                question = QUESTIONS[index % len(QUESTIONS)]
                for version in (original, compressed):
                    marker = f"[{uuid.uuid4().hex[:12]}] "
                    inline = {
                        "messages": [
                            {"role": "system", "content": marker + version.text},
                            {"role": "user", "content": question},
                        ],
                        "max_tokens": max_tokens,
                        "temperature": 0.0,
                    }
                    cold[version.ref].append(queued_sample(rig, inline)[0])
            warming = counted("warm TTFT, both versions (1 to cache)", samples + 1, unit="pairs")
            for index in warming.track(range(-1, samples)):  # -1: one unmeasured, to cache each
                question = QUESTIONS[(index + samples) % len(QUESTIONS)]
                for version in (original, compressed):
                    named = {
                        "messages": [{"role": "user", "content": question}],
                        "system_prompt": version.ref,
                        "max_tokens": max_tokens,
                        "temperature": 0.0,
                    }
                    ttft = queued_sample(rig, named)[0]
                    if index >= 0:
                        warm[version.ref].append(ttft)
            gate = run_prompt_gate(
                rig.client,
                a_ref=original.ref,
                b_ref=compressed.ref,
                cases=gate_cases,
                tier=tier,
                threshold_points=gate_threshold,
                progress=ProgressBar("  gate", len(gate_cases), unit="cases"),
            )
    cold_a, cold_b = median(cold[original.ref]), median(cold[compressed.ref])
    warm_a, warm_b = median(warm[original.ref]), median(warm[compressed.ref])
    verdict = gate.result
    return {
        "bench": "prompt",
        "tier": tier.value,
        "original": original.ref,
        "compressed": compressed.ref,
        "original_tokens": original_tokens,
        "compressed_tokens": result.tokens,
        "token_ratio": round(result.tokens / original_tokens, 3),
        "original_ttft_ms_cold": rounded(cold_a),
        "compressed_ttft_ms_cold": rounded(cold_b),
        "original_ttft_ms_warm": rounded(warm_a),
        "compressed_ttft_ms_warm": rounded(warm_b),
        "cold_speedup": round(cold_a / cold_b, 2),
        "warm_speedup": round(warm_a / warm_b, 2),
        "samples": samples,
        "quality_original": round(verdict.a.value, 3),
        "quality_compressed": round(verdict.b.value, 3),
        "quality_delta_points": round(verdict.delta.value * 100, 1),
        "quality_delta_ci_points": [
            round(verdict.delta.low * 100, 1),
            round(verdict.delta.high * 100, 1),
        ],
        "quality_flips": [verdict.flips.a_only, verdict.flips.b_only],
        "gate_cases": verdict.n,
        "gate_cases_needed": verdict.cases_needed,
        "gate_threshold_points": gate_threshold,
        "verdict": verdict.verdict,
    }


@contextlib.contextmanager
def _worker_env(name: str, value: str) -> Iterator[None]:
    # The rig's worker inherits this process's environment: its prompts folder too.
    before = os.environ.get(name)
    os.environ[name] = value
    try:
        yield
    finally:
        if before is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = before
