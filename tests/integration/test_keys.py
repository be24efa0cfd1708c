"""API keys: listed without secrets, revoked from the CLI, refused once the cache forgets."""

from __future__ import annotations

import time

import pytest
from starlette.testclient import TestClient

from producer.cli import main
from producer.gateway.app import create_app
from producer.gateway.cli import format_keys
from producer.gateway.context import GatewayContext
from producer.gateway.keys import create_key, hash_secret, list_keys, revoke_key
from schemas.db import make_engine, make_sessions
from schemas.errors import KeyNotFound
from schemas.settings import Settings

pytestmark = pytest.mark.integration


def test_keys_are_listed_without_secrets_and_revoked_once(
    integration_settings: Settings,
) -> None:
    engine = make_engine(integration_settings.database_url)
    sessions = make_sessions(engine)
    first, first_secret = create_key(sessions, "billing", rate_limit_per_min=60)
    second, _ = create_key(sessions, "search")
    listed = [k for k in list_keys(sessions) if k.id in {first.id, second.id}]
    assert [(k.id, k.name, k.rate_limit_per_min) for k in listed] == [
        (first.id, "billing", 60),
        (second.id, "search", 600),
    ]
    assert all(k.revoked_at is None for k in listed)
    assert first_secret not in repr(listed) and hash_secret(first_secret) not in repr(listed)

    revoked, newly = revoke_key(sessions, first.id)
    assert newly and revoked.revoked_at is not None
    again, newly_again = revoke_key(sessions, first.id)
    assert not newly_again and again.revoked_at == revoked.revoked_at
    status = {k.id: k.revoked_at is not None for k in list_keys(sessions)}
    assert (status[first.id], status[second.id]) == (True, False)
    with pytest.raises(KeyNotFound, match="llmq keys list"):
        revoke_key(sessions, "no-such-key")
    engine.dispose()


def test_the_keys_commands_list_and_revoke(
    integration_settings: Settings,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("LLMQ_DATABASE_URL", integration_settings.database_url)
    assert format_keys([]) == "no API keys (create one: llmq keys create NAME)"
    engine = make_engine(integration_settings.database_url)
    key, secret = create_key(make_sessions(engine), "billing", rate_limit_per_min=42)
    engine.dispose()

    assert main(["keys", "list"]) == 0
    header, *rows = capsys.readouterr().out.splitlines()
    (row,) = [line for line in rows if line.startswith(key.id)]
    assert header.split() == ["ID", "NAME", "CREATED", "REVOKED", "RATE/MIN"]
    assert row.split()[:2] == [key.id, "billing"] and row.split()[-2:] == ["-", "42"]
    assert secret not in row and hash_secret(secret) not in row

    assert main(["keys", "revoke", key.id]) == 0
    assert f"revoked key {key.id}" in capsys.readouterr().out
    assert main(["keys", "list"]) == 0
    (row,) = [line for line in capsys.readouterr().out.splitlines() if line.startswith(key.id)]
    assert row.split()[-2] != "-"
    assert main(["keys", "revoke", "nope"]) == 1
    assert "no API key with id 'nope'" in capsys.readouterr().err


def test_a_revoked_key_is_refused_once_the_key_cache_forgets_it(
    integration_settings: Settings,
) -> None:
    engine = make_engine(integration_settings.database_url)
    sessions = make_sessions(engine)
    key, secret = create_key(sessions, "leaked")
    headers = {"Authorization": f"Bearer {secret}"}
    app = create_app(integration_settings, key_cache_s=0.5)
    with TestClient(app) as http:
        assert http.get("/v1/models", headers=headers).status_code == 200
        gateway: GatewayContext = app.state.gateway
        # The cache holds the key's hash, never the secret itself.
        assert secret not in gateway.keys._keys and hash_secret(secret) in gateway.keys._keys
        assert all(secret not in repr(entry) for entry in gateway.keys._keys.values())

        revoke_key(sessions, key.id)
        revoked_at = time.monotonic()
        while http.get("/v1/models", headers=headers).status_code == 200:
            assert time.monotonic() - revoked_at < 0.5 + 1.0, "still accepted past the cache"
            time.sleep(0.05)
        refused = http.get("/v1/models", headers=headers)
    engine.dispose()
    assert refused.status_code == 401
    assert refused.json()["error"]["code"] == "invalid_api_key"
