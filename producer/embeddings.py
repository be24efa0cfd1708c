"""Submitting embedding jobs: texts in, a job of the embedding tier out.

An embedding job takes the path every job takes: validated here, written as a queued
row owned by its submitter (idempotency keys scoped to that owner), then its message
pushed on ``llm.embed.<priority>``, where a worker of the embedding tier answers it.
Its result's text holds the vectors (``schemas.embeddings.pack_vectors``);
:func:`vectors_of` reads them back.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy.orm import Session, sessionmaker

from producer.admission import WorkerDirectory
from producer.enqueue import Enqueuer
from producer.jobs import delete_job, insert_job
from producer.submission import describe_validation_error
from schemas.embeddings import EmbeddingRequest, unpack_vectors
from schemas.errors import InvalidRequest, LlmqError
from schemas.jobs import JobResult
from schemas.queues import Priority, Tier
from schemas.requests import EnqueueOptions, RoutingDecision
from schemas.tables import Job

EmbedInput = str | Sequence[str] | Mapping[str, Any] | EmbeddingRequest
"""One text, a list of texts, or a whole request (its ``input`` and ``user``)."""


@dataclass(frozen=True)
class EmbeddingSubmission:
    """An embedding request that passed every check."""

    request: EmbeddingRequest
    options: EnqueueOptions
    request_hash: str


def prepare_embeddings(
    texts: EmbedInput,
    *,
    priority: str,
    idempotency_key: str | None,
    owner: str | None,
    deadline_s: float | None,
) -> EmbeddingSubmission:
    """Validate the texts and enqueue options. Raises ``InvalidRequest`` naming the
    problem (``input`` for the texts)."""
    if isinstance(texts, EmbeddingRequest):
        request = texts
    else:
        if isinstance(texts, Mapping):
            raw = dict(texts)
        elif isinstance(texts, str):
            raw = {"input": [texts]}
        elif isinstance(texts, Sequence) and not isinstance(texts, bytes | bytearray):
            raw = {"input": list(texts)}
        else:
            raise InvalidRequest("input must be a string or a list of strings")
        try:
            request = EmbeddingRequest.model_validate(raw)
        except ValidationError as exc:
            raise InvalidRequest(f"invalid request: {describe_validation_error(exc)}") from exc
    try:
        options = EnqueueOptions.model_validate(
            {
                "tier": Tier.EMBED,
                "priority": priority,
                "idempotency_key": idempotency_key,
                "owner": owner,
                "deadline_s": deadline_s,
            }
        )
    except ValidationError as exc:
        raise InvalidRequest(f"invalid enqueue options: {describe_validation_error(exc)}") from exc
    canonical = {
        "request": request.model_dump(mode="json"),
        "tier": Tier.EMBED.value,
        "priority": str(options.priority),
        "deadline_s": options.deadline_s,
    }
    encoded = json.dumps(canonical, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    return EmbeddingSubmission(request, options, hashlib.sha256(encoded.encode()).hexdigest())


def record_and_enqueue(
    submission: EmbeddingSubmission,
    *,
    sessions: sessionmaker[Session],
    enqueuer: Enqueuer,
    workers: WorkerDirectory,
    require_warm_worker: bool,
    job_id: str | None = None,
) -> Job:
    """Write the queued row, then push its message (the row is removed if the push
    fails); an idempotent replay returns the existing job and pushes nothing.

    Raises ``NoWarmWorker`` (with ``require_warm_worker``, when no worker serves the
    embedding tier), ``IdempotencyConflict``, ``QueueFull``, ``BrokerUnavailable`` or
    ``DatabaseUnavailable``.
    """
    if require_warm_worker:
        workers.require_warm(Tier.EMBED)
    options = submission.options
    job, created = insert_job(
        sessions,
        request=submission.request,
        decision=RoutingDecision(
            tier=Tier.EMBED, requested=Tier.EMBED, reason="embeddings are served by their tier"
        ),
        priority=options.priority,
        idempotency_key=options.idempotency_key,
        owner=options.owner,
        deadline_s=options.deadline_s,
        request_hash=submission.request_hash,
        job_id=job_id,
    )
    if created:
        try:
            enqueuer.enqueue(job.id, tier=Tier.EMBED, priority=Priority(job.priority))
        except BaseException:  # nothing is left half-enqueued, whatever stopped it
            delete_job(sessions, job.id)
            raise
    return job


def vectors_of(result: JobResult) -> list[list[float]]:
    """The embeddings of a finished embedding job, one per input in input order.

    Raises ``LlmqError`` when the result is not an embedding job's.
    """
    try:
        return unpack_vectors(result.text)
    except ValueError as exc:
        raise LlmqError(f"job {result.job_id} is not an embedding job") from exc
