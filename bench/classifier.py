"""``llmq bench classifier``: single-query latency (embedding included) and quality.

Quality is the router as it routes (classifier plus policy) on the validation split, the
labelled requests it was not trained on: accuracy, large-tier recall, per-tier
precision and recall, and the confusion matrix (rows: labelled tier, columns: routed).
"""

from __future__ import annotations

import time
from typing import Any

from bench.harness import counted, step
from producer.router.classifier import DifficultyClassifier
from producer.router.dataset import load_examples
from producer.router.evaluation import evaluate_router
from producer.router.policy import PolicyConfig, apply_policy
from schemas.percentiles import median, percentile
from schemas.queues import Tier

WARMUP = 50


def run_classifier_bench(
    classifier: DifficultyClassifier, policy: PolicyConfig, *, samples: int
) -> dict[str, Any]:
    """Time ``samples`` single routing decisions on distinct texts, then score validation.

    Every timed text is new to the classifier (a numbered variant of a dataset request),
    so its cache of repeated texts never answers for it.
    """
    examples = load_examples()
    texts = [f"{examples[i % len(examples)].text} (ticket {i})" for i in range(WARMUP + samples)]
    timings = []
    with counted(f"routing decisions ({WARMUP} warm-up)", len(texts), unit="decisions") as bar:
        for index, text in enumerate(texts):
            started = time.perf_counter()
            apply_policy(classifier.predict(text), policy)
            if index >= WARMUP:
                timings.append((time.perf_counter() - started) * 1000.0)
            bar.advance()
    validation = [e for e in examples if e.split == "validation"]
    with step(f"routing the {len(validation)} held-out requests"):
        quality = evaluate_router(classifier, policy, validation)
    return {
        "bench": "classifier",
        "n": samples,
        "p50_ms": round(median(timings), 3),
        "p99_ms": round(percentile(timings, 99), 3),
        "accuracy": round(quality.accuracy, 4),
        "large_recall": round(quality.recall["large"], 4),
        "validation_examples": len(validation),
        "artifact_data_hash": classifier.metadata.get("data_hash"),
        # Rows: labelled tier; columns: the tier routed to (classifier plus policy).
        "labels": [tier.value for tier in Tier],
        "confusion": quality.confusion,
        "precision": {tier: round(value, 4) for tier, value in quality.precision.items()},
        "recall": {tier: round(value, 4) for tier, value in quality.recall.items()},
        # Every timed decision, for the report's latency distribution.
        "latency_samples_ms": [round(t, 4) for t in timings],
    }
