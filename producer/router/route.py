"""Where a request's tier is decided: the one hook every submit passes through.

An explicit tier always wins. ``auto`` runs the difficulty classifier and the policy
(err upward, escalate low confidence), then, for interactive work, the load-aware
step. Every decision carries its reason, and is counted in Redis.
"""

from __future__ import annotations

import contextlib
import logging
import time
from typing import Literal

import redis

from producer.admission import WorkerDirectory
from producer.router.artifact import current_artifact_path, load_artifact
from producer.router.classifier import DifficultyClassifier
from producer.router.load import load_adjusted
from producer.router.policy import PolicyConfig, apply_policy
from producer.router.served import nearest_served
from producer.router.tuning import Score, tuned_score, tuned_threshold
from schemas.errors import BrokerUnavailable, ConfigError
from schemas.queues import ROUTING_COUNTS_KEY, Priority, Tier
from schemas.requests import GenerationRequest, RoutingDecision
from schemas.settings import Settings

log = logging.getLogger(__name__)


class Router:
    """Holds the classifier (when one is trained) and applies the routing policy."""

    def __init__(
        self,
        settings: Settings,
        redis_client: redis.Redis | None = None,
        *,
        workers: WorkerDirectory | None = None,
    ) -> None:
        self._settings = settings
        self._redis = redis_client
        if workers is None and redis_client is not None:
            workers = WorkerDirectory(redis_client)
        self._workers = workers
        self.classifier = load_classifier(settings)
        self.policy, self.threshold_source = policy_for(settings, self.classifier)

    def route(
        self,
        request: GenerationRequest,
        *,
        requested: Tier | Literal["auto"],
        priority: Priority = Priority.INTERACTIVE,
    ) -> RoutingDecision:
        """Pick the tier that serves ``request``; never raises for the request's content."""
        if requested != "auto":
            return RoutingDecision(tier=requested, requested=requested, reason="explicit tier")
        decision, kind = self._classify(routing_text(request))
        decision = decision.model_copy(update={"routed_tier": decision.tier})
        served = self._served_tier(decision.tier)
        if served is not None and served != decision.tier:
            decision = decision.model_copy(
                update={
                    "tier": served,
                    "reason": f"{decision.reason}; no worker serves {decision.tier}: "
                    f"the nearest served tier is {served}",
                }
            )
            kind = "fallback"
        if priority is Priority.INTERACTIVE and self._redis is not None:
            decision = self._consider_load(decision)
        self._count(decision.tier, "load" if decision.load_adjusted else kind)
        return decision

    def _served_tier(self, wanted: Tier) -> Tier | None:
        """The nearest tier to ``wanted`` whose queue will be read (a worker, one
        starting or restarting, or an autoscaler); None if none is or Redis is away."""
        if self._workers is None:
            return None
        directory = self._workers

        def served(tier: Tier) -> bool:
            config = self._settings.tiers.get(tier)
            return config is not None and (config.scales_from_zero or directory.serves(tier))

        try:
            return nearest_served(wanted, served)
        except BrokerUnavailable:
            return None  # the enqueue right after reports Redis problems clearly

    def _classify(self, text: str) -> tuple[RoutingDecision, str]:
        """The decision and how it was made: ``default``, ``classified`` or ``escalated``."""
        if self.classifier is None:
            default = RoutingDecision(
                tier=self._settings.default_tier,
                requested="auto",
                reason="auto: no router trained yet (llmq router train); default tier",
            )
            return default, "default"
        try:
            outcome = apply_policy(self.classifier.predict(text), self.policy)
        except Exception as exc:
            log.exception("the classifier failed; routing upward")
            upward = RoutingDecision(
                tier=Tier.LARGE, requested="auto", reason=f"classifier error ({exc}); err upward"
            )
            return upward, "default"
        decision = RoutingDecision(
            tier=outcome.tier,
            requested="auto",
            reason=outcome.reason,
            confidence=outcome.confidence,
        )
        return decision, "escalated" if outcome.escalated else "classified"

    def _consider_load(self, decision: RoutingDecision) -> RoutingDecision:
        assert self._redis is not None and self._workers is not None
        try:
            workers = self._workers.snapshot()
            tier, why = load_adjusted(self._redis, decision.tier, self._settings, workers)
        except (redis.RedisError, BrokerUnavailable):
            return decision  # the enqueue right after reports Redis problems clearly
        if why is None:
            return decision
        return decision.model_copy(
            update={"tier": tier, "reason": f"{decision.reason}; {why}", "load_adjusted": True}
        )

    def _count(self, tier: Tier, kind: str) -> None:
        """Count an auto decision as ``<tier>:<default|classified|escalated|load>``."""
        if self._redis is None:
            return
        with contextlib.suppress(redis.RedisError):
            self._redis.hincrby(ROUTING_COUNTS_KEY, f"{tier.value}:{kind}", 1)


def policy_for(
    settings: Settings, classifier: DifficultyClassifier | None
) -> tuple[PolicyConfig, str]:
    """The policy a router applies, and where its large threshold came from: ``setting``
    (``LLMQ_ROUTER_LARGE_THRESHOLD`` set), ``tuned`` (``llmq router tune`` wrote it into
    the artifact; then large is decided by the tuned score alone, as the frontier swept
    it) or ``default``."""
    threshold, source = settings.router_large_threshold, "default"
    tuned = tuned_threshold(classifier.metadata) if classifier is not None else None
    if "router_large_threshold" in settings.model_fields_set:
        source = "setting"
    elif tuned is not None:
        threshold, source = tuned, "tuned"
    # A tuned threshold routes as the frontier measured it: large by its score alone
    # (p(large), or the outcome head's where tuning chose that one).
    score: Score = "difficulty"
    if source == "tuned" and classifier is not None and classifier.outcome_head is not None:
        score = tuned_score(classifier.metadata)
    policy = PolicyConfig(
        threshold,
        settings.router_min_confidence,
        large_by_score_only=source == "tuned",
        score=score,
    )
    return policy, source


def routing_text(request: GenerationRequest) -> str:
    """What the classifier reads: the latest user turn (the ask being routed)."""
    return next(m.content for m in reversed(request.messages) if m.role == "user")


def load_classifier(settings: Settings) -> DifficultyClassifier | None:
    """The current trained classifier, or None if none was trained on this host."""
    path = current_artifact_path(settings.router_folder)
    if path is None:
        return None
    started = time.monotonic()
    try:
        classifier = DifficultyClassifier(load_artifact(path))
    except ConfigError:
        log.warning("router artifact %s is unusable; auto routes to the default tier", path)
        return None
    log.info("loaded router %s in %.0f ms", path.name, (time.monotonic() - started) * 1000)
    return classifier
