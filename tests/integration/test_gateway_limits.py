"""The gateway's bounds and per-key fairness over real HTTP, Redis and PostgreSQL.

Authentication before the body, body and message caps, failed logins per address,
the sliding request window, and the per-key limits on active jobs and open streams.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterator

import httpx
import pytest
import redis
import redis.asyncio as aioredis

from producer.client import Client
from producer.gateway.fairness import count_active_jobs
from producer.gateway.keys import KeyIdentity, create_key
from producer.gateway.ratelimit import sliding_window
from schemas.db import make_engine, make_sessions
from schemas.queues import Priority, Tier, queue_name
from schemas.settings import Settings
from tests.gateway_server import running_gateway

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
HELLO = {"model": "small", "messages": [{"role": "user", "content": "hello"}]}
BATCH_QUEUE = queue_name(Tier.SMALL, Priority.BATCH)


def new_key(
    settings: Settings, name: str = "k", rate_limit: int = 600
) -> tuple[KeyIdentity, dict[str, str]]:
    engine = make_engine(settings.database_url)
    identity, secret = create_key(make_sessions(engine), name, rate_limit_per_min=rate_limit)
    engine.dispose()
    return identity, {"Authorization": f"Bearer {secret}"}


def error_of(response: httpx.Response, status: int, code: str) -> str:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    return str(error["message"])


@pytest.fixture
def gateway(integration_settings: Settings) -> Iterator[httpx.Client]:
    with running_gateway(integration_settings) as url, httpx.Client(base_url=url) as http:
        yield http


def test_no_key_is_401_whatever_the_body(gateway: httpx.Client) -> None:
    json_type = {"content-type": "application/json"}
    assert gateway.post(CHAT, content=b"{not json", headers=json_type).status_code == 401
    huge = b'{"model": "small", "messages": [' + b" " * (3 * 1024 * 1024) + b"]}"
    error_of(gateway.post(CHAT, content=huge, headers=json_type), 401, "invalid_api_key")
    wrong_types = {"model": 5, "messages": "no"}
    assert gateway.post(CHAT, json=wrong_types).status_code == 401


def test_an_oversized_body_is_413(gateway: httpx.Client, integration_settings: Settings) -> None:
    _, headers = new_key(integration_settings)
    big = {**HELLO, "metadata": {"pad": "x" * (1024 * 1024)}}
    message = error_of(gateway.post(CHAT, json=big, headers=headers), 413, "request_too_large")
    assert "exceeds the limit of 1048576 bytes" in message

    def chunked() -> Iterator[bytes]:  # no Content-Length: the streamed size is counted
        yield b'{"model": "small", "messages": ['
        for _ in range(300):
            yield b" " * 4096

    streamed = gateway.post(CHAT, content=chunked(), headers=headers)
    error_of(streamed, 413, "request_too_large")


def test_message_count_and_length_are_capped(integration_settings: Settings) -> None:
    settings = integration_settings.model_copy(update={"max_messages": 3, "max_message_chars": 50})
    _, headers = new_key(settings)
    many = {**HELLO, "messages": [{"role": "user", "content": "hi"}] * 4}
    long = {**HELLO, "messages": [{"role": "user", "content": "x" * 51}]}
    parts = {
        **HELLO,
        "messages": [{"role": "user", "content": [{"type": "text", "text": "y" * 51}]}],
    }
    with running_gateway(settings) as url, httpx.Client(base_url=url) as http:
        message = error_of(http.post(CHAT, json=many, headers=headers), 400, "invalid_request")
        assert message == "too many messages: 4, at most 3 are accepted"
        message = error_of(http.post(CHAT, json=long, headers=headers), 400, "invalid_request")
        assert message == "messages.0.content is 51 characters long, at most 50 are accepted"
        error_of(http.post(CHAT, json=parts, headers=headers), 400, "invalid_request")
        # At the limits the request passes the bounds (and stops later: no worker).
        fits = {**HELLO, "messages": [{"role": "user", "content": "x" * 50}] * 3}
        error_of(http.post(CHAT, json=fits, headers=headers), 503, "no_warm_worker")


def test_failed_authentications_are_limited_per_address(integration_settings: Settings) -> None:
    settings = integration_settings.model_copy(update={"auth_failures_per_min": 3})
    _, good = new_key(settings)
    with running_gateway(settings) as url, httpx.Client(base_url=url) as http:
        assert http.get("/v1/models", headers=good).status_code == 200  # success: not counted
        for _ in range(3):
            bad = http.get("/v1/models", headers={"Authorization": "Bearer llmq-guess"})
            error_of(bad, 401, "invalid_api_key")
        blocked = http.get("/v1/models", headers={"Authorization": "Bearer llmq-guess"})
        assert "too many failed authentications" in error_of(blocked, 429, "rate_limit_exceeded")
        assert 1 <= int(blocked.headers["retry-after"]) <= 60
        # A valid key is admitted from the blocked address (behind a load balancer or
        # NAT, another client's guesses must not lock a tenant out), cached or not.
        assert http.get("/v1/models", headers=good).status_code == 200
        _, fresh = new_key(settings, "fresh")
        assert http.get("/v1/models", headers=fresh).status_code == 200
        # Bad keys from it stay blocked, and the block is not extended by them; a
        # missing key guesses nothing and is told what is missing.
        error_of(http.get("/v1/models"), 401, "invalid_api_key")
        guess = {"Authorization": "Bearer llmq-guess"}
        error_of(http.get("/v1/models", headers=guess), 429, "rate_limit_exceeded")
        # Paths outside /v1 stay open.
        assert http.get("/healthz").status_code == 200


def test_requests_without_a_key_never_block_their_address(
    integration_settings: Settings,
) -> None:
    settings = integration_settings.model_copy(update={"auth_failures_per_min": 3})
    with running_gateway(settings) as url, httpx.Client(base_url=url) as http:
        for _ in range(10):  # a scraper left without its key
            error_of(http.get("/metrics"), 401, "invalid_api_key")
            error_of(http.get("/v1/models"), 401, "invalid_api_key")
        # Nothing was counted: a guess is still the first of its address.
        guess = http.get("/v1/models", headers={"Authorization": "Bearer llmq-guess"})
        error_of(guess, 401, "invalid_api_key")


def test_the_request_window_slides(integration_settings: Settings) -> None:
    async def scenario() -> list[int | None]:
        client = aioredis.Redis.from_url(integration_settings.broker_url)
        try:
            hit = lambda: sliding_window(client, "llmq:ratelimit:t", limit=2, window_ms=1000)  # noqa: E731
            results = [await hit(), await hit()]
            await asyncio.sleep(0.6)
            results.append(await hit())  # the first two are still inside the window
            await asyncio.sleep(0.5)  # 1.1 s after the first two: they slid out
            results += [await hit(), await hit(), await hit()]
            return results
        finally:
            await client.aclose()

    results = asyncio.run(scenario())
    # A fixed one-second window starting between the hits would have let the third in.
    assert results[:2] == [None, None]
    assert results[2] == 1
    assert results[3:5] == [None, None]
    assert results[5] == 1


def test_a_key_at_its_active_job_limit_gets_429(integration_settings: Settings) -> None:
    settings = integration_settings.model_copy(update={"key_max_active_jobs": 2})
    identity, headers = new_key(settings, "busy")
    _, other = new_key(settings, "other")
    with Client(settings) as client:
        handles = [
            client.submit("hello", tier="small", priority="batch", owner=identity.id)
            for _ in range(2)
        ]
        with running_gateway(settings) as url, httpx.Client(base_url=url) as http:
            refused = http.post(CHAT, json=HELLO, headers=headers)
            message = error_of(refused, 429, "rate_limit_exceeded")
            assert "2 queued or running jobs" in message
            assert int(refused.headers["retry-after"]) >= 1
            # Another key is not affected: it gets as far as the missing worker.
            error_of(http.post(CHAT, json=HELLO, headers=other), 503, "no_warm_worker")
            # A finished job frees its place.
            handles[0].cancel()
            error_of(http.post(CHAT, json=HELLO, headers=headers), 503, "no_warm_worker")


def test_open_streams_are_limited_per_key_and_freed_on_disconnect(
    integration_settings: Settings,
) -> None:
    settings = integration_settings.model_copy(update={"key_max_open_streams": 1})
    identity, headers = new_key(settings, "streamer")
    store = redis.Redis.from_url(settings.broker_url)
    streams_key = f"llmq:streams:{identity.id}"
    body = {**HELLO, "stream": True, "priority": "batch"}
    with running_gateway(settings) as url, httpx.Client(base_url=url) as http:
        with http.stream("POST", CHAT, json=body, headers=headers) as first:
            assert first.status_code == 200
            assert store.zcard(streams_key) == 1
            second = http.post(CHAT, json=body, headers=headers)
            assert "1 streams open" in error_of(second, 429, "rate_limit_exceeded")
            assert second.headers["retry-after"] == "5"
        # The client hung up with no token sent yet: the slot comes back.
        deadline = time.monotonic() + 5
        while store.zcard(streams_key) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert store.zcard(streams_key) == 0
        with http.stream("POST", CHAT, json=body, headers=headers) as again:
            assert again.status_code == 200
    store.close()


@pytest.mark.parametrize("path", [CHAT, "/v1/completions"])
def test_a_job_over_its_keys_rate_is_refused_before_anything_is_sent(
    integration_settings: Settings, path: str
) -> None:
    # These calls are counted while their job is prepared; the verdict still comes
    # first: no row, no message, no stream slot left for the refused one.
    identity, headers = new_key(integration_settings, f"rated{len(path)}", rate_limit=1)
    store = redis.Redis.from_url(integration_settings.broker_url)
    engine = make_engine(integration_settings.database_url)
    streams_key = f"llmq:streams:{identity.id}"
    prompt = {"messages": HELLO["messages"]} if path == CHAT else {"prompt": "hello"}
    body = {"model": "small", **prompt, "stream": True, "priority": "batch"}
    with (
        running_gateway(integration_settings) as url,
        httpx.Client(base_url=url) as http,
        http.stream("POST", path, json=body, headers=headers) as first,
    ):
        assert first.status_code == 200
        queued = store.llen(BATCH_QUEUE)
        assert queued >= 1
        refused = http.post(path, json=body, headers=headers)
        assert "rate limit of 1 requests/min" in error_of(refused, 429, "rate_limit_exceeded")
        assert int(refused.headers["retry-after"]) >= 1
        assert count_active_jobs(make_sessions(engine), identity.id) == 1
        assert store.llen(BATCH_QUEUE) == queued
        assert store.zcard(streams_key) == 1  # the first stream's, only
    engine.dispose()
    store.close()
