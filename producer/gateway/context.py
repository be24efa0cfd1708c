"""What the gateway's parts share: its settings, its client, the caller's key, the job
a call may read, and the metrics.

One ``GatewayContext`` per app: the routes and the serving layer take it, the app's
lifespan opens and closes its client.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Awaitable
from contextlib import asynccontextmanager

from fastapi import FastAPI
from starlette.requests import Request

from producer.aio import AsyncClient
from producer.gateway.errors import NOT_FOUND, UNAUTHORIZED, GatewayError
from producer.gateway.fairness import KeyFairness
from producer.gateway.guard import KeyCheck
from producer.gateway.keys import KeyIdentity
from producer.gateway.metrics import GatewayMetrics
from producer.gateway.scrape import ClusterScrape, ScrapeAge
from schemas.settings import Settings
from schemas.tables import Job


class GatewayContext:
    """One gateway's shared state. ``client`` exists from the lifespan's start to its end."""

    def __init__(
        self, settings: Settings, *, require_keys: bool, key_cache_s: float | None = None
    ) -> None:
        self.settings = settings
        self.result_timeout_s = settings.timeouts.gateway_result_s
        """The longest a call waits for its job's answer, streamed or whole."""
        self.require_keys = require_keys
        self.metrics = GatewayMetrics()
        self.cluster = ClusterScrape(settings, refresh_s=settings.metrics_refresh_s)
        self.metrics.registry.register(ScrapeAge(self.cluster))
        self._client: AsyncClient | None = None
        self.keys = KeyCheck(
            sessions=lambda: self.client.sessions,
            redis=lambda: self.client.redis,
            auth_failures_per_min=settings.auth_failures_per_min,
            key_cache_s=settings.timeouts.key_cache_s if key_cache_s is None else key_cache_s,
        )
        self.fairness = KeyFairness(
            sessions=lambda: self.client.sessions,
            redis=lambda: self.client.redis,
            max_active_jobs=settings.key_max_active_jobs,
            max_open_streams=settings.key_max_open_streams,
            # The longest a stream can last, plus a margin: a dead gateway's leases lapse.
            stream_lease_s=self.result_timeout_s + 60,
        )

    @property
    def client(self) -> AsyncClient:
        assert self._client is not None, "the gateway has not started"
        return self._client

    @asynccontextmanager
    async def lifespan(self, _app: FastAPI) -> AsyncIterator[None]:
        """Open the client and start the cluster scrape; stop and close them after."""
        self._client = await asyncio.to_thread(AsyncClient, self.settings)
        self.cluster.start()
        try:
            yield
        finally:
            await asyncio.to_thread(self.cluster.stop)
            await self._client.aclose()

    async def identify(self, request: Request) -> KeyIdentity | None:
        """The caller's key, as the front door checked it (None when keys are off)."""
        if not self.require_keys:
            return None
        identity: KeyIdentity | None = getattr(request.state, "identity", None)
        if identity is None:  # only if a /v1 route escaped the front door
            raise GatewayError("missing API key: send Authorization: Bearer <key>", UNAUTHORIZED)
        return identity

    @staticmethod
    def admission(request: Request) -> Awaitable[None] | None:
        """The call's rate verdict that the front door left to its route, still to be
        awaited (None: the call was counted before its route, or keys are off)."""
        admission: Awaitable[None] | None = getattr(request.state, "admission", None)
        return admission

    async def owned_job(self, job_id: str, identity: KeyIdentity | None) -> Job:
        """The job row, if the caller owns it; another key's job does not exist for them."""
        row = await self.client.job(job_id)
        if identity is not None and row.owner != identity.id:
            raise GatewayError(f"no job with id {job_id}", NOT_FOUND)
        return row
