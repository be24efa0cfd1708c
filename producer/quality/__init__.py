"""The A/B quality gate's core: case files, scoring rules, paired statistics, verdict.

Plain functions with no services and no torch at import (the similarity rule loads
all-MiniLM-L6-v2 only when a similarity case is scored)::

    from producer.quality import load_cases, score, paired_gate, PairedResult

    cases = load_cases()  # the bundled file, or load_cases(Path("my-cases.jsonl"))
    pairs = [PairedResult(c.id, score(c, answer_a[c.id]), score(c, answer_b[c.id])) for c in cases]
    result = paired_gate(pairs, threshold_points=3.0)
    result.verdict  # "pass" | "fail" | "inconclusive"
"""

from __future__ import annotations

from producer.quality.cases import BUNDLED_CASES, Case, Rule, load_cases, parse_cases
from producer.quality.scoring import Embed, score, similarity
from producer.quality.stats import (
    DEFAULT_THRESHOLD_POINTS,
    Flips,
    GateResult,
    Interval,
    PairedResult,
    Verdict,
    paired_gate,
)

__all__ = [
    "BUNDLED_CASES",
    "DEFAULT_THRESHOLD_POINTS",
    "Case",
    "Embed",
    "Flips",
    "GateResult",
    "Interval",
    "PairedResult",
    "Rule",
    "Verdict",
    "load_cases",
    "paired_gate",
    "parse_cases",
    "score",
    "similarity",
]
