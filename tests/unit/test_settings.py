from __future__ import annotations

import json
from pathlib import Path

import pytest

from schemas.errors import ConfigError
from schemas.queues import Tier
from schemas.settings import BUNDLED_LARGE_MODEL, BUNDLED_MODEL, Settings


def test_defaults_are_the_embedded_stack(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("LLMQ_BROKER_URL", "LLMQ_DATABASE_URL", "LLMQ_TIERS", "LLMQ_TIERS_FILE"):
        monkeypatch.delenv(var, raising=False)
    settings = Settings.from_env()
    assert settings.broker_url == "redis://127.0.0.1:6379/0"
    assert settings.database_url.startswith("sqlite:")
    assert settings.tier(Tier.SMALL).model == settings.tier(Tier.MEDIUM).model == BUNDLED_MODEL
    assert settings.tier(Tier.LARGE).model == BUNDLED_LARGE_MODEL
    assert settings.default_tier is Tier.SMALL


def test_environment_overrides_and_partial_tier_table(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMQ_BROKER_URL", "rediss://cache:6380/2")
    monkeypatch.setenv(
        "LLMQ_TIERS", json.dumps({"large": {"model": "org/big", "max_model_len": 8192}})
    )
    settings = Settings.from_env()
    assert settings.broker_url == "rediss://cache:6380/2"
    assert settings.tier(Tier.LARGE).model == "org/big"
    assert settings.tier(Tier.LARGE).max_model_len == 8192
    assert settings.tier(Tier.SMALL).model == BUNDLED_MODEL


def test_tier_table_from_a_file(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    table = tmp_path / "tiers.json"
    table.write_text(json.dumps({"medium": {"model": "/models/m", "quantization": "awq"}}))
    monkeypatch.setenv("LLMQ_TIERS_FILE", str(table))
    settings = Settings.from_env()
    assert settings.tier(Tier.MEDIUM).quantization == "awq"


@pytest.mark.parametrize(
    ("var", "value", "problem"),
    [
        ("LLMQ_DEFAULT_TIER", "huge", "default_tier"),
        ("LLMQ_TIERS", '{"small": {"max_model_len": 1}}', "max_model_len"),
        ("LLMQ_TIERS", '{"small": {"colour": "red"}}', "colour"),
        ("LLMQ_TIERS_FILE", "/nonexistent/tiers.json", "cannot read tier table"),
    ],
)
def test_invalid_settings_raise_config_error(
    monkeypatch: pytest.MonkeyPatch, var: str, value: str, problem: str
) -> None:
    monkeypatch.setenv(var, value)
    with pytest.raises(ConfigError, match=problem):
        Settings.from_env()
