"""``llmq bench quant``: a tier against a variant in another precision, speed and quality.

On this CPU host the variants the device runs are dtypes (float32, bfloat16, float16;
vLLM's CPU backend also runs AWQ, GPTQ and INT8 W8A8 checkpoints, which the bundled
model is not). Both answer the same shipped cases through the queue, each in a block in
which only its own engine is up, and the A/B gate judges the difference. On a GPU host
the same command compares a 4-bit checkpoint: ``--b-quantization awq --b-model DIR``.
"""

from __future__ import annotations

from typing import Any

from producer.quality.cases import load_bench_pool
from producer.quality.gate import GateOptions, cases_source, run_gate
from schemas.queues import Tier
from schemas.settings import Settings

SHORT = {"float32": "fp32", "bfloat16": "bf16", "float16": "fp16", "auto": "auto"}


def variant_name(tier: Tier, dtype: str, quantization: str | None) -> Tier:
    """``small@bf16``, ``small@awq``: the variant the benchmark configures for B."""
    suffix = (quantization or SHORT.get(dtype, dtype)).lower()
    room = 16 - len(tier.base.value) - 1
    return Tier(f"{tier.base.value}@{suffix[:room].strip('-_')}")


def run_quant(
    settings: Settings,
    *,
    tier: Tier,
    n: int,
    max_tokens: int,
    concurrency: int,
    a_dtype: str,
    b_dtype: str,
    b_quantization: str | None,
    b_model: str | None,
    threshold: float,
) -> dict[str, Any]:
    """A (``tier`` in ``a_dtype``) vs B (its variant in ``b_dtype``/``b_quantization``).

    Raises ``ConfigError`` or ``EngineError`` when a side cannot start (an unsupported
    quantization or dtype says so, naming the device).
    """
    a = tier.base
    b = variant_name(a, b_dtype, b_quantization)
    base = settings.tier(a)
    changed: dict[str, Any] = {"dtype": b_dtype, "quantization": b_quantization}
    if b_model:
        changed["model"] = b_model
    tiers = {
        **settings.tiers,
        a: base.model_copy(update={"dtype": a_dtype}),
        b: base.model_copy(update=changed),
    }
    measured = settings.model_copy(update={"tiers": tiers})
    shipped = load_bench_pool()
    # Every n-th case, so each kind of case (and rule) is in the subset.
    cases = shipped[:: max(1, len(shipped) // n)][:n]
    report = run_gate(
        measured,
        cases,
        GateOptions(
            a=a, b=b, max_tokens=max_tokens, concurrency=concurrency, threshold_points=threshold
        ),
        source=cases_source(None, cases),
    )
    speedup = report.b.tok_s / report.a.tok_s if report.a.tok_s else None
    gate = report.gate
    return {
        "bench": "quant",
        "a": f"{a} ({a_dtype})",
        "b": f"{b} ({b_quantization or b_dtype})",
        "n": report.n,
        "max_tokens": max_tokens,
        "concurrency": concurrency,
        "a_ttft_ms_p50": report.a.ttft_ms_p50,
        "b_ttft_ms_p50": report.b.ttft_ms_p50,
        "a_tok_s": report.a.tok_s,
        "b_tok_s": report.b.tok_s,
        "speedup": None if speedup is None else round(speedup, 3),
        "a_quality": round(gate.a.value, 4),
        "b_quality": round(gate.b.value, 4),
        "delta": round(gate.delta.value, 4),
        "delta_ci": [round(gate.delta.low, 4), round(gate.delta.high, 4)],
        "flips": {"lost": gate.flips.a_only, "gained": gate.flips.b_only},
        "threshold_points": threshold,
        "verdict": gate.verdict,
        "cases_needed": gate.cases_needed,
        "timings": report.timing_note,
        "source": "measured on this host",
    }
