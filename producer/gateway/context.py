"""What a group of routes needs of the gateway: its settings, its client, the caller.

Route modules (batches, conversations) take this instead of the ``Gateway`` class, so
they never import ``app.py``, which imports them to mount their routes.
"""

from __future__ import annotations

from typing import Protocol

from starlette.requests import Request

from producer.aio import AsyncClient
from producer.gateway.keys import KeyIdentity
from schemas.settings import Settings


class GatewayContext(Protocol):
    """The part of :class:`producer.gateway.app.Gateway` that route modules use."""

    settings: Settings

    @property
    def client(self) -> AsyncClient:
        """The gateway's client (opened by its lifespan)."""
        ...

    async def identify(self, request: Request) -> KeyIdentity | None:
        """The caller's key, as the front door checked it (None when keys are off)."""
        ...
