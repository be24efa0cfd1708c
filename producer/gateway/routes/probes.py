"""What load balancers, orchestrators and Prometheus poll: ``/healthz`` (the process
answers), ``/readyz`` (its Redis and database answer) and ``/metrics``."""

from __future__ import annotations

import asyncio
import time

from fastapi import FastAPI
from fastapi.responses import JSONResponse, Response
from prometheus_client import generate_latest

from producer.gateway.context import GatewayContext
from producer.gateway.errors import error_response
from schemas.errors import LlmqError


class ProbeRoutes:
    """The handlers, sharing the gateway and the last readiness check."""

    def __init__(self, gateway: GatewayContext) -> None:
        self.gateway = gateway
        self._ready: tuple[float, LlmqError | None] | None = None
        self._ready_lock = asyncio.Lock()

    async def healthz(self) -> dict[str, str]:
        return {"status": "ok"}

    async def readyz(self) -> JSONResponse:
        failure = await self._readiness()
        if failure is not None:
            return error_response(failure)
        return JSONResponse({"status": "ready"})

    async def _readiness(self) -> LlmqError | None:
        """Why the gateway is not ready (None: it is), as checked at most
        ``readyz_cache_s`` ago: a probe flood costs one ping and one read per period."""
        async with self._ready_lock:
            if self._ready is not None:
                checked_at, failure = self._ready
                if time.monotonic() - checked_at < self.gateway.settings.readyz_cache_s:
                    return failure
            try:
                await asyncio.to_thread(self.gateway.client.sync.ready)
                failure = None
            except LlmqError as exc:
                failure = exc
            self._ready = (time.monotonic(), failure)
            return failure

    async def prometheus(self) -> Response:
        # The gateway's own series are in memory; the cluster's come from the last
        # rendering (scrape.py), so a scrape never waits on Redis or the database.
        body = generate_latest(self.gateway.metrics.registry) + self.gateway.cluster.read()
        return Response(body, media_type="text/plain; version=0.0.4")


def add_probe_routes(app: FastAPI, gateway: GatewayContext) -> None:
    """Add ``/healthz``, ``/readyz`` and ``/metrics``."""
    routes = ProbeRoutes(gateway)
    app.add_api_route("/healthz", routes.healthz, methods=["GET"])
    app.add_api_route("/readyz", routes.readyz, methods=["GET"])
    app.add_api_route("/metrics", routes.prometheus, methods=["GET"])
