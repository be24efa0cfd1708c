"""The gateway's front door at the ASGI level: what it reads before it refuses."""

from __future__ import annotations

import asyncio
import json
from typing import Any

from starlette.responses import JSONResponse, Response
from starlette.types import Message, Receive, Scope, Send

from producer.gateway.errors import UNAUTHORIZED, GatewayError, http_error_for, rate_limited
from producer.gateway.guard import FrontDoor
from producer.gateway.keys import KeyIdentity
from schemas.errors import LlmqError

KEY = KeyIdentity("k1", "test", 600)


async def authorize(authorization: str, _address: str) -> KeyIdentity:
    if authorization != "Bearer good":
        raise GatewayError("invalid API key", UNAUTHORIZED)
    return KEY


def on_error(exc: LlmqError) -> Response:
    http = http_error_for(exc)
    return JSONResponse({"error": {"message": str(exc), "code": http.code}}, http.status)


class App:
    """Records what reached it: the identity and the whole body."""

    def __init__(self) -> None:
        self.body: bytes | None = None
        self.identity: Any = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        self.identity = scope.get("state", {}).get("identity")
        body = b""
        while True:
            message = await receive()
            body += message.get("body", b"")
            if not message.get("more_body"):
                break
        self.body = body
        await JSONResponse({"ok": True})(scope, receive, send)


def call(
    door: FrontDoor, headers: dict[str, str], chunks: list[bytes], path: str = "/v1/chat"
) -> tuple[int, dict[str, Any], int]:
    """Status, JSON body and how many body chunks the door read."""
    scope: Scope = {
        "type": "http",
        "method": "POST",
        "path": path,
        "headers": [(k.lower().encode(), v.encode()) for k, v in headers.items()],
        "client": ("10.0.0.1", 1234),
    }
    read = 0
    sent: list[Message] = []

    async def receive() -> Message:
        nonlocal read
        if read >= len(chunks):
            return {"type": "http.disconnect"}
        read += 1
        return {"type": "http.request", "body": chunks[read - 1], "more_body": read < len(chunks)}

    async def send(message: Message) -> None:
        sent.append(message)

    asyncio.run(door(scope, receive, send))
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = b"".join(m.get("body", b"") for m in sent if m["type"] == "http.response.body")
    return status, json.loads(body), read


def door(app: App, max_body_bytes: int = 1000, **options: Any) -> FrontDoor:
    return FrontDoor(
        app, authorize=authorize, max_body_bytes=max_body_bytes, on_error=on_error, **options
    )


def test_no_key_is_refused_before_a_byte_of_the_body_is_read() -> None:
    app = App()
    status, body, read = call(door(app), {"content-length": "99999999"}, [b"{not json" * 1000] * 50)
    assert (status, body["error"]["code"], read) == (401, "invalid_api_key", 0)
    assert app.body is None


def test_a_declared_length_over_the_cap_is_413_unread() -> None:
    app = App()
    status, body, read = call(
        door(app), {"authorization": "Bearer good", "content-length": "1001"}, [b"x" * 1001]
    )
    assert (status, body["error"]["code"], read) == (413, "request_too_large", 0)
    assert "limit of 1000 bytes" in body["error"]["message"]
    assert app.body is None


def test_a_streamed_body_over_the_cap_stops_being_read_at_the_cap() -> None:
    app = App()
    chunks = [b"x" * 400] * 10  # no Content-Length: chunked
    status, body, read = call(door(app), {"authorization": "Bearer good"}, chunks)
    assert (status, body["error"]["code"]) == (413, "request_too_large")
    assert read == 3  # 1,200 bytes > 1,000: the remaining 2,800 are never read
    assert app.body is None


def test_a_body_within_the_cap_reaches_the_app_whole_with_the_identity() -> None:
    app = App()
    chunks = [b'{"a":', b" 1}"]
    status, body, _ = call(door(app), {"authorization": "Bearer good"}, chunks)
    assert (status, body) == (200, {"ok": True})
    assert app.body == b'{"a": 1}'
    assert app.identity == KEY


def test_paths_outside_v1_need_no_key_but_are_bounded() -> None:
    app = App()
    assert call(door(app), {}, [b"{}"], path="/healthz")[0] == 200
    assert call(door(app), {}, [b"x" * 2000], path="/healthz")[0] == 413


def test_a_malformed_content_length_is_a_400() -> None:
    status, body, _ = call(
        door(App()), {"authorization": "Bearer good", "content-length": "12abc"}, [b"{}"]
    )
    assert (status, body["error"]["code"]) == (400, "invalid_request")


def test_a_body_not_sent_in_time_is_a_408_on_any_path() -> None:
    # Headers promise a body that never comes: the door stops waiting at its deadline
    # (an unauthenticated path included) instead of holding the connection for ever.
    app = App()
    front = FrontDoor(app, authorize=authorize, max_body_bytes=1000, on_error=on_error)
    front.body_timeout_s = 0.2
    scope: Scope = {
        "type": "http",
        "method": "POST",
        "path": "/healthz",
        "headers": [(b"content-length", b"100")],
        "client": ("10.0.0.1", 1234),
    }
    sent: list[Message] = []

    async def receive() -> Message:
        await asyncio.sleep(3600)
        return {"type": "http.disconnect"}

    async def send(message: Message) -> None:
        sent.append(message)

    async def run() -> None:
        await asyncio.wait_for(front(scope, receive, send), timeout=5)

    asyncio.run(run())
    status = next(m["status"] for m in sent if m["type"] == "http.response.start")
    body = json.loads(b"".join(m.get("body", b"") for m in sent if m.get("body")))
    assert status == 408
    assert "within 0.2 s" in body["error"]["message"]
    assert app.body is None


async def over_its_rate(_identity: KeyIdentity) -> None:
    await asyncio.sleep(0.05)  # a round trip to Redis
    raise GatewayError("rate limit of 600 requests/min exceeded", rate_limited(3))


class VerdictTakingApp(App):
    """Takes the rate's verdict itself, as the job routes do."""

    def __init__(self) -> None:
        super().__init__()
        self.pending_on_entry: bool | None = None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        admission = scope["state"]["admission"]
        self.pending_on_entry = not admission.done()
        try:
            await admission
        except GatewayError as exc:
            await on_error(exc)(scope, receive, send)
            return
        await super().__call__(scope, receive, send)


def test_a_route_that_takes_the_verdict_runs_while_the_key_is_counted() -> None:
    app = VerdictTakingApp()
    front = door(app, admit=over_its_rate, admitted_by_route=frozenset({"/v1/chat"}))
    status, body, _ = call(front, {"authorization": "Bearer good"}, [b"{}"])
    assert app.pending_on_entry is True
    assert (status, body["error"]["code"]) == (429, "rate_limit_exceeded")
    assert app.body is None


def test_other_paths_are_counted_before_their_route() -> None:
    app = App()
    front = door(app, admit=over_its_rate, admitted_by_route=frozenset({"/v1/chat/completions"}))
    status, body, read = call(front, {"authorization": "Bearer good"}, [b"{}"], path="/v1/chat")
    assert (status, body["error"]["code"], read) == (429, "rate_limit_exceeded", 0)
    assert app.identity is None and app.body is None
