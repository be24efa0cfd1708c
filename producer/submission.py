"""Turning what a caller passed into a validated request, options and routing decision."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, TypeVar

from pydantic import ValidationError

from producer.limits import check_fits
from producer.router.route import Router
from schemas.errors import InvalidRequest, validation_problems
from schemas.prompt_registry import PromptRegistry
from schemas.requests import EnqueueOptions, GenerationRequest, RoutingDecision
from schemas.settings import Settings

RequestLike = GenerationRequest | Mapping[str, Any] | str


@dataclass(frozen=True)
class Submission:
    """A request that passed every check and knows its tier."""

    request: GenerationRequest
    options: EnqueueOptions
    decision: RoutingDecision
    request_hash: str
    """What the caller asked for, hashed; an idempotent replay must match it."""


def prepare_submission(
    request: RequestLike,
    *,
    tier: str,
    priority: str,
    idempotency_key: str | None,
    owner: str | None = None,
    deadline_s: float | None = None,
    settings: Settings,
    prompts: PromptRegistry,
    router: Router,
) -> Submission:
    """Validate, route and pin the system prompt's version.

    Raises ``InvalidRequest`` (``UnknownPrompt``, ``PromptTooLong``) naming the problem.
    """
    parsed = parse_request(request)
    options = _validate(
        EnqueueOptions,
        {
            "tier": tier,
            "priority": priority,
            "idempotency_key": idempotency_key,
            "owner": owner,
            "deadline_s": deadline_s,
        },
        "enqueue options",
    )
    # Hashed before the prompt's version is pinned: a replay after a new version of
    # the prompt is still the same request.
    hashed = request_hash(parsed, options)
    if options.tier != "auto" and options.tier not in settings.tiers:
        known = ", ".join(sorted(str(name) for name in settings.tiers))
        raise InvalidRequest(f"no tier {options.tier} is configured (configured: {known})")
    decision = router.route(parsed, requested=options.tier, priority=options.priority)
    system_text = None
    if parsed.system_prompt is not None:
        # A variant runs its base tier's model: the base tier's prompts serve it too.
        prompt = prompts.resolve(parsed.system_prompt, tier=decision.tier.base)
        parsed = parsed.model_copy(update={"system_prompt": prompt.ref})
        system_text = prompt.text
    check_fits(parsed, tier=decision.tier, settings=settings, system_text=system_text)
    return Submission(request=parsed, options=options, decision=decision, request_hash=hashed)


def request_hash(request: GenerationRequest, options: EnqueueOptions) -> str:
    """SHA-256 of the request and where it was asked to go, in one canonical JSON form."""
    canonical = {
        "request": request.model_dump(mode="json"),
        "tier": str(options.tier),
        "priority": str(options.priority),
        "deadline_s": options.deadline_s,
    }
    encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return hashlib.sha256(encoded.encode()).hexdigest()


def parse_request(request: RequestLike) -> GenerationRequest:
    """Accept a request model, its dict form, or plain text as one user message."""
    if isinstance(request, GenerationRequest):
        return request
    if isinstance(request, str):
        return _validate(
            GenerationRequest, {"messages": [{"role": "user", "content": request}]}, "request"
        )
    if isinstance(request, Mapping):
        return _validate(GenerationRequest, dict(request), "request")
    raise InvalidRequest(
        f"request must be text, a dict or a GenerationRequest, not {type(request).__name__}"
    )


M = TypeVar("M", GenerationRequest, EnqueueOptions)


def _validate(model: type[M], data: dict[str, Any], what: str) -> M:
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise InvalidRequest(f"invalid {what}: {describe_validation_error(exc)}") from exc


def describe_validation_error(exc: ValidationError) -> str:
    """One line per problem: where it is and what is wrong."""
    return validation_problems(exc.errors())
