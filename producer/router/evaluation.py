"""Scoring a router on the validation split, as it routes: classifier plus policy."""

from __future__ import annotations

from producer.router.classifier import DifficultyClassifier
from producer.router.dataset import Example
from producer.router.policy import PolicyConfig, apply_policy
from producer.router.softmax_head import Evaluation, evaluate


def evaluate_router(
    classifier: DifficultyClassifier, policy: PolicyConfig, examples: list[Example]
) -> Evaluation:
    """Accuracy, per-tier precision/recall and confusion of the routed tiers."""
    routed = [apply_policy(classifier.predict(e.text), policy).tier for e in examples]
    return evaluate([e.tier for e in examples], routed)
