"""The Batch API's objects in OpenAI's shapes: files, batches, output and error lines."""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from producer.gateway.protocol.chat import completion
from producer.gateway.protocol.common import JobAnswer
from producer.gateway.protocol.embeddings import embeddings_list
from producer.gateway.protocol.text_completions import text_completion
from schemas.embeddings import unpack_base64, unpack_vectors
from schemas.events import ChoiceOutput, Timings, TokenLogprob, Usage
from schemas.jobs import JobStatus
from schemas.queues import Tier
from schemas.tables import Batch, BatchFile, Job, as_utc
from schemas.tools import stored_tool_use


def epoch(moment: datetime | None) -> int | None:
    return None if moment is None else int(as_utc(moment).timestamp())


def file_object(row: BatchFile) -> dict[str, Any]:
    """An OpenAI ``file`` object."""
    return {
        "id": row.id,
        "object": "file",
        "bytes": row.bytes,
        "created_at": epoch(row.created_at),
        "filename": row.filename,
        "purpose": row.purpose,
        "status": "processed",
        "status_details": None,
    }


def batch_object(row: Batch) -> dict[str, Any]:
    """An OpenAI ``batch`` object."""
    return {
        "id": row.id,
        "object": "batch",
        "endpoint": row.endpoint,
        "errors": {"object": "list", "data": row.errors} if row.errors else None,
        "input_file_id": row.input_file_id,
        "completion_window": row.completion_window,
        "status": row.status,
        "output_file_id": row.output_file_id,
        "error_file_id": row.error_file_id,
        "created_at": epoch(row.created_at),
        "in_progress_at": epoch(row.in_progress_at),
        "expires_at": epoch(row.expires_at),
        "finalizing_at": epoch(row.finalizing_at),
        "completed_at": epoch(row.completed_at),
        "failed_at": epoch(row.failed_at),
        "expired_at": epoch(row.expired_at),
        "cancelling_at": epoch(row.cancelling_at),
        "cancelled_at": epoch(row.cancelled_at),
        "request_counts": {"total": row.total, "completed": row.completed, "failed": row.failed},
        "metadata": row.batch_metadata,
        "llmq": {"tier": row.tier, "enqueued": row.enqueued},
    }


def output_line(job: Job) -> str:
    """A finished job as a line of its batch's output file: a ``chat.completion``, a
    ``text_completion`` for a line of a ``/v1/completions`` batch (a raw prompt), or a
    ``list`` of embeddings for a line of a ``/v1/embeddings`` batch."""
    request = job.request or {}
    common: dict[str, Any] = {
        "job_id": job.id,
        "model": str((job.routing or {}).get("requested") or job.tier),
        "text": job.output_text or "",
        "finish_reason": job.finish_reason,
        "usage": Usage(
            prompt_tokens=job.prompt_tokens or 0,
            completion_tokens=job.completion_tokens or 0,
            cached_prompt_tokens=job.cached_prompt_tokens or 0,
        ),
        "timings": Timings(
            queue_wait_ms=job.queue_wait_ms or 0.0,
            ttft_ms=job.ttft_ms,
            total_ms=job.total_ms or 0.0,
        ),
        "tier": job.tier,
        "choices": [ChoiceOutput.model_validate(c) for c in job.output_choices]
        if job.output_choices is not None
        else None,
    }
    if job.tier == Tier.EMBED:
        body = _embeddings_body(job, common)
    else:
        top, tokens = _kept_logprobs(job, common)
        answer = JobAnswer(**common)
        if request.get("raw_prompt"):
            body = text_completion(answer, logprobs=top, tokens=tokens)
        else:
            logprobs = tokens if top is not None else None
            body = completion(answer, tool_use=stored_tool_use(request), logprobs=logprobs)
        body["created"] = epoch(job.finished_at) or body["created"]
    line = {
        "id": f"batch_req_{job.id}",
        "custom_id": job.custom_id,
        "response": {"status_code": 200, "request_id": job.id, "body": body},
        "error": None,
    }
    return json.dumps(line, ensure_ascii=False)


def _kept_logprobs(job: Job, common: dict[str, Any]) -> tuple[int | None, list[TokenLogprob]]:
    """How many top log probabilities the line asked for (None: none), and the first
    choice's tokens as its row keeps them; each of several choices gets its own in
    ``common["choices"]``."""
    sampling = (job.request or {}).get("sampling") or {}
    top = sampling.get("logprobs") if isinstance(sampling, dict) else None
    if not isinstance(top, int):
        return None, []
    kept = [
        [TokenLogprob.model_validate(t) for t in choice] for choice in job.output_logprobs or []
    ]
    choices: list[ChoiceOutput] | None = common["choices"]
    if choices is not None:
        common["choices"] = [
            choice.model_copy(
                update={"logprobs": kept[choice.index] if choice.index < len(kept) else []}
            )
            for choice in choices
        ]
    return top, kept[0] if kept else []


def _embeddings_body(job: Job, common: dict[str, Any]) -> dict[str, Any]:
    """An embeddings line's answer, each vector in the encoding the line asked for."""
    text = job.output_text or "[]"
    base64 = (job.request or {}).get("encoding_format") == "base64"
    return embeddings_list(
        model="embed",
        vectors=unpack_base64(text) if base64 else unpack_vectors(text),
        usage=common["usage"],
        timings=common["timings"],
        job_id=job.id,
        tier=job.tier,
    )


def job_error_code(job: Job, batch_status: str) -> str:
    """Why a batch's job has no answer, as the error line's code."""
    status = JobStatus(job.status)
    if status in (JobStatus.QUEUED, JobStatus.RUNNING, JobStatus.CANCELLED, JobStatus.EXPIRED):
        if batch_status == "expired":
            return "batch_expired"
        if batch_status in ("cancelling", "cancelled"):
            return "batch_cancelled"
        return "cancelled" if status is JobStatus.CANCELLED else "expired"
    return "job_failed"


def error_line(
    *, line_id: str, custom_id: str | None, code: str, message: str, request_id: str | None = None
) -> str:
    """A line of a batch's error file."""
    line = {
        "id": line_id,
        "custom_id": custom_id,
        "response": None,
        "error": {"code": code, "message": message, "request_id": request_id},
    }
    return json.dumps(line, ensure_ascii=False)
