"""The gateway's front door, a pure ASGI middleware run before any route.

In this order, for every HTTP request: a ``/v1`` call without a valid key is refused
(401, or 429 from an address that failed authentication too often; a valid key is
never refused for its address) and a key over its request rate is refused (429), all
from the headers alone; then the body is read, at most ``max_body_bytes`` of it (413
beyond) and within ``body_timeout_s`` (408 beyond: a client trickling a body holds
nothing for long). Only then does FastAPI parse anything, so an unauthenticated or
oversized body costs neither parsing nor memory. On the paths whose route takes the
rate's verdict itself (``admitted_by_route``), the call is counted while its body is
read and its job prepared, and the route sends nothing on before the verdict.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import KW_ONLY, dataclass
from typing import NoReturn

import redis.asyncio as aioredis
from sqlalchemy.orm import Session, sessionmaker
from starlette.responses import Response
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from producer.gateway.errors import (
    BAD_REQUEST,
    UNAUTHORIZED,
    GatewayError,
    HttpError,
    rate_limited,
)
from producer.gateway.keys import KEY_CACHE_S, KeyIdentity, authenticate, hash_secret
from producer.gateway.probe_pacing import PROBE_PATHS, ProbePacer
from producer.gateway.ratelimit import auth_blocked, over_limit, record_auth_failure
from schemas.errors import LlmqError

TOO_LARGE = HttpError(413, "invalid_request_error", "request_too_large")
TOO_SLOW = HttpError(408, "invalid_request_error", "request_timeout")
# The default of a FrontDoor built without settings; the gateway passes
# LLMQ_BODY_READ_TIMEOUT_S.
BODY_TIMEOUT_S = 30.0

Authorize = Callable[[str, str], Awaitable[KeyIdentity | None]]
"""(Authorization header, client address) -> the caller's key; raises GatewayError."""

Admit = Callable[[KeyIdentity], Awaitable[None]]
"""Counts one call of a key against its rate; raises GatewayError when it is over."""


class KeyCheck:
    """Who calls, from the Authorization header: the key check the front door runs,
    with the login and rate limits.

    ``sessions`` and ``redis`` are read at each call (the gateway's client opens only
    with its lifespan). A checked key is trusted for ``key_cache_s`` seconds: a revoked
    key is refused within that time.
    """

    def __init__(
        self,
        *,
        sessions: Callable[[], sessionmaker[Session]],
        redis: Callable[[], aioredis.Redis],
        auth_failures_per_min: int,
        key_cache_s: float = KEY_CACHE_S,
    ) -> None:
        self._sessions = sessions
        self._redis = redis
        self.auth_failures_per_min = auth_failures_per_min
        self.key_cache_s = key_cache_s
        # By the key's hash, never the secret: a memory dump must not yield live keys.
        self._keys: dict[str, tuple[KeyIdentity, float]] = {}

    async def identify(self, authorization: str, address: str) -> KeyIdentity:
        """The key behind an Authorization header; enforces the login limits.

        A valid key is always looked at, and accepted even from an address blocked for
        failed logins: behind a load balancer or NAT, other clients' bad keys must not
        lock a tenant out. Only a missing or invalid key from a blocked address is
        refused with the block.

        Raises ``GatewayError``: 429 for an invalid key from an address with too many
        recent failed logins; 401 for a missing or invalid key.
        """
        scheme, _, secret = authorization.partition(" ")
        secret = secret.strip() if scheme.lower() == "bearer" else ""
        identity = await self._authenticate(secret) if secret else None
        if identity is None:
            await self._refuse(address, missing=not secret)
        return identity

    async def admit(self, identity: KeyIdentity) -> None:
        """Count one call of ``identity`` against its rate; raises a 429
        ``GatewayError`` when it is over (the call is not counted) and
        ``BrokerUnavailable`` when Redis is unreachable."""
        wait = await over_limit(self._redis(), identity.id, identity.rate_limit_per_min)
        if wait is not None:
            raise GatewayError(
                f"rate limit of {identity.rate_limit_per_min} requests/min exceeded",
                rate_limited(wait),
            )

    async def _refuse(self, address: str, *, missing: bool) -> NoReturn:
        """Refuse a missing or invalid key. A missing key guesses nothing: 401, never
        counted (a scraper or probe left without its key must not block its address).
        An invalid one: 429 while ``address`` is blocked (counted no further), else 401
        (counted against it)."""
        if missing:
            raise GatewayError("missing API key: send Authorization: Bearer <key>", UNAUTHORIZED)
        limit = self.auth_failures_per_min
        blocked = await auth_blocked(self._redis(), address, limit)
        if blocked is not None:
            raise GatewayError(
                f"too many failed authentications from this address (limit {limit}/min)",
                rate_limited(blocked),
            )
        await record_auth_failure(self._redis(), address)
        raise GatewayError("invalid API key", UNAUTHORIZED)

    def _cached_key(self, secret: str) -> KeyIdentity | None:
        """The identity of a key checked less than ``key_cache_s`` ago, else None."""
        if not secret:
            return None
        cached = self._keys.get(hash_secret(secret))
        if cached is not None and time.monotonic() - cached[1] < self.key_cache_s:
            return cached[0]
        return None

    async def _authenticate(self, secret: str) -> KeyIdentity | None:
        # Known keys are remembered briefly: a database round trip per call would be
        # most of what the gateway adds to a first token. Revocation lands within the TTL.
        cached = self._cached_key(secret)
        if cached is not None:
            return cached
        digest = hash_secret(secret)
        self._keys.pop(digest, None)
        identity = await asyncio.to_thread(authenticate, self._sessions(), secret)
        if identity is not None:
            self._keys[digest] = (identity, time.monotonic())
        return identity


@dataclass(eq=False)
class FrontDoor:
    """Authenticates ``/v1`` calls (and ``keyed_paths``, such as ``/metrics``) from their
    headers, then bounds the body. Built as Starlette builds a middleware: the app
    positionally, the rest by keyword."""

    app: ASGIApp
    _: KW_ONLY
    authorize: Authorize | None
    max_body_bytes: int
    on_error: Callable[[LlmqError], Response]
    upload_paths: frozenset[str] = frozenset()
    max_upload_bytes: int = 0
    keyed_paths: frozenset[str] = frozenset()
    body_timeout_s: float = BODY_TIMEOUT_S
    probe_pacer: ProbePacer | None = None
    admit: Admit | None = None
    admitted_by_route: frozenset[str] = frozenset()

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        try:
            path: str = scope["path"]
            client = scope.get("client")
            address = client[0] if client else "unknown"
            if self.probe_pacer is not None and path in PROBE_PATHS:
                # Before the key check: a flood of keyed scrapes must not reach Redis.
                await self.probe_pacer.take(address)
            keyed = path == "/v1" or path.startswith("/v1/") or path in self.keyed_paths
            if self.authorize is not None and keyed:
                headers = _headers(scope)
                identity = await self.authorize(headers.get("authorization", ""), address)
                scope.setdefault("state", {})["identity"] = identity
                if self.admit is not None and identity is not None:
                    await self._admit(scope, path, self.admit(identity))
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

    async def _admit(self, scope: Scope, path: str, admission: Awaitable[None]) -> None:
        """Count the call against its key's rate: now, or, on ``admitted_by_route``,
        while the route reads and prepares the call (it awaits ``state["admission"]``
        before it writes or sends anything). Raises what the count raises, when now."""
        if path not in self.admitted_by_route:
            await admission
            return
        pending = asyncio.ensure_future(admission)
        # A call refused before its route awaited it: its verdict is read here, so
        # asyncio reports nothing unread (the call was counted all the same).
        pending.add_done_callback(_read_verdict)
        scope["state"]["admission"] = pending
        # One turn of the loop sends the count's request now, not at the route's
        # first wait: its answer is in by the time the route needs it.
        await asyncio.sleep(0)

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


def _read_verdict(admission: asyncio.Future[None]) -> None:
    if not admission.cancelled():
        admission.exception()


def _headers(scope: Scope) -> dict[str, str]:
    return {
        name.decode("latin-1").lower(): value.decode("latin-1")
        for name, value in scope.get("headers", [])
    }
