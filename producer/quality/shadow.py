"""Live shadow: a share of a tier's real requests answered again by a variant, compared.

``llmq ab live small@bf16 --share 0.05`` runs beside the serving stack. It reads the
tier's finished jobs (never a user's answer in flight: a job is shadowed only after it
is done) and sends the chosen share again to the variant at batch priority, so it
never takes an interactive slot. A job is chosen by a hash of its id, so the share
holds whatever the traffic and every runner picks the same jobs. Shadow jobs belong to
their own owner, ``llmq-shadow``, with the primary job's id as idempotency key: a pass
that runs twice sends nothing twice, no API key ever sees them, and per-owner counts
(billing, limits) leave them out.

Each pair is scored with the embedding rule, answer against answer: the variant
agrees when its answer's similarity to the primary's reaches ``agree_at``. The running
verdict is the gate's, on agreement (the primary scores 1 as its own reference).
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from sqlalchemy import select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, aliased, sessionmaker

from producer.client import Client
from producer.quality.runner import OWNER as GATE_OWNER
from producer.quality.scoring import Embed, similarity
from producer.quality.stats import DEFAULT_THRESHOLD_POINTS, GateResult, paired_gate
from schemas.boundary import database_error
from schemas.errors import InvalidRequest
from schemas.jobs import JobStatus
from schemas.queues import Priority, Tier
from schemas.tables import Job, utcnow

SHADOW_OWNER = "llmq-shadow"
AGREE_AT = 0.8
PASS_LIMIT = 500


def in_share(job_id: str, share: float) -> bool:
    """Whether ``job_id`` is among the ``share`` (0-1) of jobs shadowed; stable per id."""
    digest = hashlib.sha256(job_id.encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64 < share


def shadow_request(request: dict[str, Any]) -> dict[str, Any]:
    """The primary job's request as its shadow sends it: the same messages, but in no
    conversation. The messages already hold the history the primary saw; recorded
    under the shadow's owner, tenants that reuse a conversation id would share one
    transcript (and its nightly summary)."""
    return {name: value for name, value in request.items() if name != "conversation_id"}


def shadow_pass(
    client: Client,
    sessions: sessionmaker[Session],
    variant: Tier,
    *,
    share: float,
    since: datetime | None = None,
    limit: int = PASS_LIMIT,
) -> int:
    """Send the share of ``variant``'s base tier's finished jobs (since ``since``) that
    has no shadow yet to the variant; return how many were sent. Raises
    ``InvalidRequest`` for a base tier or a share outside (0, 1], and what submit raises.
    """
    if not variant.is_variant:
        raise InvalidRequest(f"{variant} is not a variant: shadow small@<variant>")
    if not 0 < share <= 1:
        raise InvalidRequest("the shadow share is a fraction in (0, 1]")
    shadow = aliased(Job)
    query = (
        select(Job.id, Job.request)
        .where(
            Job.tier == variant.base.value,
            Job.status == JobStatus.DONE.value,
            Job.created_at >= (since or utcnow() - timedelta(hours=24)),
            Job.owner.is_(None) | Job.owner.not_in([SHADOW_OWNER, GATE_OWNER]),
            ~select(shadow.id)
            .where(shadow.idempotency_scope == SHADOW_OWNER, shadow.idempotency_key == Job.id)
            .exists(),
        )
        .order_by(Job.created_at)
        .limit(limit * 4)
    )
    try:
        with sessions() as session:
            rows = session.execute(query).all()
    except SQLAlchemyError as exc:
        raise database_error(exc, doing="read the tier's finished jobs") from exc
    sent = 0
    for row in rows:
        if sent >= limit:
            break
        if not in_share(row.id, share):
            continue
        client.submit(
            shadow_request(row.request),
            tier=variant,
            priority=Priority.BATCH,
            owner=SHADOW_OWNER,
            idempotency_key=row.id,
        )
        sent += 1
    return sent


@dataclass(frozen=True)
class LiveReport:
    """The running comparison of a variant's shadow answers with the primaries'."""

    variant: Tier
    pairs: int
    pending: int
    mean_similarity: float | None
    agreement: float | None
    gate: GateResult


def live_report(
    sessions: sessionmaker[Session],
    variant: Tier,
    *,
    agree_at: float = AGREE_AT,
    threshold_points: float = DEFAULT_THRESHOLD_POINTS,
    embed: Embed | None = None,
    similarity_of: Callable[[str, str], float] | None = None,
) -> LiveReport:
    """Score every finished shadow pair of ``variant``; the running verdict."""
    primary = aliased(Job)
    query = (
        select(Job.status, Job.output_text, primary.output_text)
        .join(primary, primary.id == Job.idempotency_key)
        .where(Job.idempotency_scope == SHADOW_OWNER, Job.tier == variant.value)
    )
    try:
        with sessions() as session:
            rows = session.execute(query).all()
    except SQLAlchemyError as exc:
        raise database_error(exc, doing="read the shadow jobs") from exc

    def compare(a: str, b: str) -> float:
        return similarity_of(a, b) if similarity_of else similarity(a, b, embed=embed)

    done = [
        (shadow_text or "", text or "") for status, shadow_text, text in rows if status == "done"
    ]
    scores = [compare(answer, reference) for answer, reference in done]
    gate = paired_gate([(True, s >= agree_at) for s in scores], threshold_points=threshold_points)
    return LiveReport(
        variant=variant,
        pairs=len(done),
        pending=sum(1 for status, _, _ in rows if status in ("queued", "running")),
        mean_similarity=round(sum(scores) / len(scores), 4) if scores else None,
        agreement=round(gate.b.value, 4) if scores else None,
        gate=gate,
    )
