"""When Redis or the database fails, the gateway's error bodies leak nothing.

The gateway starts on working services; then its client is swapped for one whose
broker or database URL carries a password and points where nothing answers (or at a
database without llmq's tables), as when a backend goes away under a running gateway.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from producer.client import Client
from producer.gateway.app import create_app
from producer.gateway.context import GatewayContext
from producer.gateway.keys import create_key, hash_secret
from schemas.db import make_engine, make_sessions
from schemas.settings import Settings

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
HELLO = {"model": "small", "priority": "batch", "messages": [{"role": "user", "content": "hi"}]}
DOWN_REDIS = "redis://:s3cret-redis@127.0.0.1:1/0"
DOWN_POSTGRES = "postgresql+psycopg://llmq_user:s3cret-pg@127.0.0.1:1/jobs"


def assert_leaks_nothing(body: str, *secrets: str) -> None:
    for secret in ("s3cret", "127.0.0.1", "llmq_user", "SELECT", "[SQL", *secrets):
        assert secret not in body, f"{secret!r} leaked in {body}"


@contextmanager
def gateway_losing(
    settings: Settings, monkeypatch: pytest.MonkeyPatch, *, require_keys: bool, **broken: str
) -> Iterator[TestClient]:
    """A started gateway whose backends then change to ``broken`` settings."""
    app = create_app(settings, require_keys=require_keys)
    with TestClient(app, raise_server_exceptions=False) as http:
        gateway: GatewayContext = app.state.gateway
        lost = Client(settings.model_copy(update=broken), warm=False)
        monkeypatch.setattr(gateway.client, "_sync", lost)
        try:
            yield http
        finally:
            lost.close()


def new_secret(settings: Settings) -> str:
    engine = make_engine(settings.database_url)
    _identity, secret = create_key(make_sessions(engine), "a")
    engine.dispose()
    return secret


def test_a_lost_broker_leaks_neither_password_nor_address(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with gateway_losing(
        integration_settings, monkeypatch, require_keys=False, broker_url=DOWN_REDIS
    ) as http:
        ready = http.get("/readyz")
        chat = http.post(CHAT, json=HELLO)
    for response in (ready, chat):
        assert response.status_code == 503, response.text
        assert response.json()["error"]["code"] == "backend_unavailable"
        assert "Redis is unreachable" in response.json()["error"]["message"]
        assert_leaks_nothing(response.text, "redis://")


def test_a_lost_database_leaks_neither_password_nor_address(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = new_secret(integration_settings)
    with gateway_losing(
        integration_settings, monkeypatch, require_keys=True, database_url=DOWN_POSTGRES
    ) as http:
        ready = http.get("/readyz")
        chat = http.post(CHAT, json=HELLO, headers={"Authorization": f"Bearer {secret}"})
    for response in (ready, chat):
        assert response.status_code == 503, response.text
        assert "job database" in response.json()["error"]["message"]
        assert_leaks_nothing(response.text, "postgresql", secret, hash_secret(secret))


def test_a_database_without_tables_leaks_no_sql(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    secret = new_secret(integration_settings)
    empty = f"sqlite:///{tmp_path / 'empty.db'}"
    with gateway_losing(
        integration_settings, monkeypatch, require_keys=True, database_url=empty
    ) as http:
        ready = http.get("/readyz")
        chat = http.post(CHAT, json=HELLO, headers={"Authorization": f"Bearer {secret}"})
    for response in (ready, chat):
        assert response.status_code == 503, response.text
        assert "llmq db upgrade" in response.json()["error"]["message"]
        assert_leaks_nothing(response.text, "api_keys", str(tmp_path), hash_secret(secret))
