"""Operator corrections of routed jobs, turned into extra training examples."""

from __future__ import annotations

from sqlalchemy import select, update
from sqlalchemy.orm import Session, sessionmaker

from producer.router.dataset import Example
from producer.router.route import routing_text
from schemas.boundary import database_boundary
from schemas.errors import JobNotFound
from schemas.queues import Tier
from schemas.requests import GenerationRequest
from schemas.tables import Job


def correct_tier(sessions: sessionmaker[Session], job_id: str, tier: Tier) -> None:
    """Record the tier a job should have gone to; raises ``JobNotFound``."""
    with database_boundary("record the correction"), sessions.begin() as session:
        result = session.execute(
            update(Job).where(Job.id == job_id).values(corrected_tier=tier.value)
        )
    if result.rowcount == 0:  # type: ignore[attr-defined]
        raise JobNotFound(f"no job with id {job_id}")


def corrected_examples(sessions: sessionmaker[Session]) -> list[Example]:
    """Every corrected job as a training example (its latest user turn, its right tier)."""
    with sessions() as session:
        rows = session.execute(
            select(Job.request, Job.corrected_tier).where(Job.corrected_tier.is_not(None))
        ).all()
    examples = []
    for request, tier in rows:
        text = routing_text(GenerationRequest.model_validate(request))
        examples.append(Example(text=text, tier=Tier(tier), split="train"))
    return examples
