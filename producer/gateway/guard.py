"""The gateway's front door, a pure ASGI middleware run before any route.

In this order, for every HTTP request: a ``/v1`` call without a valid key is refused
(401, or 429 from an address that failed authentication too often; a valid key is
never refused for its address) and a key over its request rate is refused (429), all
from the headers alone; then the body is
read, at most ``max_body_bytes`` of it (413 beyond) and within ``body_timeout_s``
(408 beyond: a client trickling a body holds nothing for long). Only then does
FastAPI parse anything, so an unauthenticated or oversized body costs neither parsing
nor memory.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable

from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from producer.gateway.errors import BAD_REQUEST, GatewayError, HttpError
from producer.gateway.keys import KeyIdentity
from schemas.errors import LlmqError

TOO_LARGE = HttpError(413, "invalid_request_error", "request_too_large")
TOO_SLOW = HttpError(408, "invalid_request_error", "request_timeout")
BODY_TIMEOUT_S = 30.0

Authorize = Callable[[str, str], Awaitable[KeyIdentity | None]]
"""(Authorization header, client address) -> the caller's key; raises GatewayError."""


class FrontDoor:
    """Authenticates ``/v1`` calls (and ``keyed_paths``, such as ``/metrics``) from their
    headers, then bounds the body."""

    def __init__(
        self,
        app: ASGIApp,
        *,
        authorize: Authorize | None,
        max_body_bytes: int,
        on_error: Callable[[LlmqError], Response],
        upload_paths: frozenset[str] = frozenset(),
        max_upload_bytes: int = 0,
        keyed_paths: frozenset[str] = frozenset(),
        body_timeout_s: float = BODY_TIMEOUT_S,
    ) -> None:
        self.app = app
        self.authorize = authorize
        self.keyed_paths = keyed_paths
        self.max_body_bytes = max_body_bytes
        self.upload_paths = upload_paths
        self.max_upload_bytes = max_upload_bytes
        self.on_error = on_error
        self.body_timeout_s = body_timeout_s

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            path: str = scope["path"]
            keyed = path == "/v1" or path.startswith("/v1/") or path in self.keyed_paths
            if self.authorize is not None and keyed:
                headers = _headers(scope)
                client = scope.get("client")
                address = client[0] if client else "unknown"
                identity = await self.authorize(headers.get("authorization", ""), address)
                scope.setdefault("state", {})["identity"] = identity
            if path in self.upload_paths:
                # An upload is read by its route as it streams (to disk, then the
                # database), never buffered here; only its size is bounded.
                receive = self._counted_body(scope, receive)
            else:
                receive = await self._bounded_body(scope, receive)
        except LlmqError as exc:
            # The body is left unread: the server closes or drains the connection.
            await self.on_error(exc)(scope, receive, send)
            return
        await self.app(scope, receive, send)

    def _counted_body(self, scope: Scope, receive: Receive) -> Receive:
        """A ``receive`` that raises a 413 ``GatewayError`` once the upload cap is passed."""
        limit = self.max_upload_bytes
        declared = _headers(scope).get("content-length")
        if declared is not None and declared.strip().isdigit() and int(declared) > limit:
            raise GatewayError(
                f"upload of {int(declared)} bytes exceeds the limit of {limit} bytes", TOO_LARGE
            )
        size = 0

        async def counting() -> Message:
            nonlocal size
            message = await receive()
            size += len(message.get("body", b""))
            if size > limit:
                raise GatewayError(f"upload exceeds the limit of {limit} bytes", TOO_LARGE)
            return message

        return counting

    async def _bounded_body(self, scope: Scope, receive: Receive) -> Receive:
        """Read the body up to the cap; a ``receive`` that replays it to the app."""
        limit = self.max_body_bytes
        declared = _headers(scope).get("content-length")
        if declared is not None:
            if not declared.strip().isdigit():
                raise GatewayError(f"malformed Content-Length {declared!r}", BAD_REQUEST)
            if int(declared) > limit:
                raise GatewayError(
                    f"request body of {int(declared)} bytes exceeds the limit of {limit} bytes",
                    TOO_LARGE,
                )
        try:
            async with asyncio.timeout(self.body_timeout_s):
                messages = await self._read_body(receive, limit)
        except TimeoutError:
            raise GatewayError(
                f"request body not received within {self.body_timeout_s:g} s", TOO_SLOW
            ) from None
        replay = iter(messages)

        async def replaying() -> Message:
            for message in replay:
                return message
            return await receive()

        return replaying

    @staticmethod
    async def _read_body(receive: Receive, limit: int) -> list[Message]:
        messages: list[Message] = []
        size = 0
        while True:
            message = await receive()
            messages.append(message)
            if message["type"] != "http.request":
                break  # the client went away; the app hears it from the replay
            size += len(message.get("body", b""))
            if size > limit:
                # Stop here: nothing beyond the cap is read into memory.
                raise GatewayError(f"request body exceeds the limit of {limit} bytes", TOO_LARGE)
            if not message.get("more_body", False):
                break
        return messages


def _headers(scope: Scope) -> dict[str, str]:
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }
