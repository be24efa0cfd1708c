"""llmq's own job paths: ``GET /v1/jobs/{id}`` and ``POST /v1/jobs/{id}/cancel``, for
the key that owns the job (another key's job is a 404)."""

from __future__ import annotations

from typing import Any

from fastapi import FastAPI, Request

from producer.gateway.context import GatewayContext
from schemas.tables import Job


class JobRoutes:
    """The handlers, sharing the gateway."""

    def __init__(self, gateway: GatewayContext) -> None:
        self.gateway = gateway

    async def job(self, job_id: str, request: Request) -> dict[str, Any]:
        row = await self.gateway.owned_job(job_id, await self.gateway.identify(request))
        return job_view(row)

    async def cancel_job(self, job_id: str, request: Request) -> dict[str, Any]:
        """``POST /v1/jobs/{id}/cancel``: stop a job the caller owns; its state after."""
        await self.gateway.owned_job(job_id, await self.gateway.identify(request))
        await self.gateway.client.cancel(job_id)
        row = await self.gateway.client.job(job_id)
        return job_view(row)


def job_view(row: Job) -> dict[str, Any]:
    """``GET /v1/jobs/{id}``: status, timings and routing decision."""
    return {
        "id": row.id,
        "status": row.status,
        "tier": row.tier,
        "priority": row.priority,
        "routing": row.routing,
        "usage": {
            "prompt_tokens": row.prompt_tokens,
            "completion_tokens": row.completion_tokens,
            "cached_prompt_tokens": row.cached_prompt_tokens,
        },
        "timings": {
            "queue_wait_ms": row.queue_wait_ms,
            "ttft_ms": row.ttft_ms,
            "total_ms": row.total_ms,
        },
        "error": row.error,
        "created_at": row.created_at.isoformat(),
        "finished_at": row.finished_at.isoformat() if row.finished_at else None,
    }


def add_job_routes(app: FastAPI, gateway: GatewayContext) -> None:
    """Add ``GET /v1/jobs/{job_id}`` and ``POST /v1/jobs/{job_id}/cancel``."""
    routes = JobRoutes(gateway)
    app.add_api_route("/v1/jobs/{job_id}", routes.job, methods=["GET"])
    app.add_api_route("/v1/jobs/{job_id}/cancel", routes.cancel_job, methods=["POST"])
