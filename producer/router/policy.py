"""From a classifier's prediction (and queue load) to the tier a job is sent to.

Routing errs upward: a large request on a small model hurts quality, a small request
on a large model only costs money. So a moderate chance of "large" is enough to go
large, and a low-confidence answer is escalated one tier up.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from producer.router.classifier import Prediction
from schemas.queues import Tier

TIER_ORDER = list(Tier)


@dataclass(frozen=True)
class PolicyConfig:
    large_threshold: float = 0.35
    min_confidence: float = 0.5
    min_familiarity: float = 0.6
    large_by_score_only: bool = False
    """Large exactly when p(large) >= ``large_threshold`` (text it mostly does not know
    aside): the rule a measured frontier sweeps, so a tuned threshold routes as measured.
    Otherwise an argmax of large, or a low-confidence medium, also goes large."""
    score: Literal["difficulty", "outcome"] = "difficulty"
    """With ``large_by_score_only``, the score compared with the threshold: p(large) by
    difficulty, or the outcome head's chance that large answers better."""


@dataclass(frozen=True)
class PolicyDecision:
    tier: Tier
    confidence: float
    reason: str
    escalated: bool


def one_up(tier: Tier) -> Tier:
    return TIER_ORDER[min(TIER_ORDER.index(tier) + 1, len(TIER_ORDER) - 1)]


def one_down(tier: Tier) -> Tier:
    return TIER_ORDER[max(TIER_ORDER.index(tier) - 1, 0)]


def apply_policy(prediction: Prediction, config: PolicyConfig) -> PolicyDecision:
    """The tier the policy picks for a prediction, and why."""
    if config.large_by_score_only:
        return _by_score(prediction, config)
    p_large = prediction.probabilities[Tier.LARGE.value]
    if prediction.tier is not Tier.LARGE and p_large >= config.large_threshold:
        return PolicyDecision(
            Tier.LARGE,
            prediction.confidence,
            f"classified {prediction.tier} but p(large)={p_large:.2f} >= "
            f"{config.large_threshold}: err upward",
            escalated=True,
        )
    if prediction.familiarity < config.min_familiarity and prediction.tier is not Tier.LARGE:
        return _escalated(
            prediction,
            min(prediction.confidence, prediction.familiarity),
            f"but the text is unfamiliar (familiarity {prediction.familiarity:.2f} < "
            f"{config.min_familiarity}, another language or gibberish?)",
        )
    if prediction.confidence < config.min_confidence and prediction.tier is not Tier.LARGE:
        return _escalated(
            prediction,
            prediction.confidence,
            f"with low confidence {prediction.confidence:.2f} < {config.min_confidence}",
        )
    return PolicyDecision(
        prediction.tier,
        prediction.confidence,
        f"classified {prediction.tier} ({prediction.confidence:.2f})",
        escalated=False,
    )


def _escalated(prediction: Prediction, confidence: float, why: str) -> PolicyDecision:
    """One tier above the predicted one, because of ``why``."""
    tier = one_up(prediction.tier)
    return PolicyDecision(
        tier, confidence, f"classified {prediction.tier} {why}: escalated to {tier}", escalated=True
    )


def decision_score(prediction: Prediction, config: PolicyConfig) -> tuple[float, str]:
    """The score a tuned threshold is compared with, and its name: the outcome head's
    where the policy routes by it and the prediction has one, else p(large)."""
    if config.score == "outcome" and prediction.large_gain is not None:
        return prediction.large_gain, "p(large answers better)"
    return prediction.probabilities[Tier.LARGE.value], "p(large)"


def _by_score(prediction: Prediction, config: PolicyConfig) -> PolicyDecision:
    """Large iff the decision score reaches the threshold; below it, small or medium (a
    low-confidence or unfamiliar small goes medium; unfamiliar text may still go large)."""
    score, name = decision_score(prediction, config)
    if score >= config.large_threshold:
        return PolicyDecision(
            Tier.LARGE,
            score,
            f"{name}={score:.2f} >= the tuned threshold {config.large_threshold:g}",
            escalated=prediction.tier is not Tier.LARGE,
        )
    p_small = prediction.probabilities[Tier.SMALL.value]
    p_medium = prediction.probabilities[Tier.MEDIUM.value]
    tier = Tier.SMALL if p_small > p_medium else Tier.MEDIUM
    share = max(p_small, p_medium)
    below = f"{name}={score:.2f} < the tuned threshold {config.large_threshold:g}"
    if prediction.familiarity < config.min_familiarity:
        up = one_up(tier)
        return PolicyDecision(
            up,
            min(share, prediction.familiarity),
            f"{below}; {tier} but the text is unfamiliar (familiarity "
            f"{prediction.familiarity:.2f} < {config.min_familiarity}): escalated to {up}",
            escalated=True,
        )
    if tier is Tier.SMALL and share < config.min_confidence:
        return PolicyDecision(
            Tier.MEDIUM,
            share,
            f"{below}; small with low confidence {share:.2f}: escalated to medium",
            escalated=True,
        )
    return PolicyDecision(tier, share, f"{below}; {tier} ({share:.2f})", escalated=False)
