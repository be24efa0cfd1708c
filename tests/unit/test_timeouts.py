"""Operator-tunable timeouts: read from LLMQ_TIMEOUTS, checked, documented, and used."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from producer.stream_protocol import StreamReader
from schemas.errors import BrokerUnavailable, ConfigError
from schemas.settings import Settings
from schemas.timeouts import DEFAULT_TIMEOUTS, Timeouts

OPERATIONS = Path(__file__).resolve().parents[2] / "docs" / "operations.md"


def test_a_partial_object_in_the_environment_changes_only_what_it_sets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(
        "LLMQ_TIMEOUTS", json.dumps({"heartbeat_s": 2, "db_retry_delays_s": [0, 1.5]})
    )
    timeouts = Settings.from_env().timeouts
    assert timeouts.heartbeat_s == 2.0
    assert timeouts.db_retry_delays_s == (0.0, 1.5)
    assert timeouts.model_dump(exclude={"heartbeat_s", "db_retry_delays_s"}) == (
        DEFAULT_TIMEOUTS.model_dump(exclude={"heartbeat_s", "db_retry_delays_s"})
    )


def test_without_the_variable_the_defaults_hold(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("LLMQ_TIMEOUTS", raising=False)
    assert Settings.from_env().timeouts == Timeouts()


@pytest.mark.parametrize(
    "value",
    [
        {"heartbeat_s": 3, "registry_expiry_s": 3},  # entries would lapse between beats
        {"gateway_result_s": 0},
        {"db_retry_delays_s": [1, -1]},
        {"no_such_wait_s": 1},
    ],
)
def test_an_invalid_object_is_a_config_error(
    value: dict[str, object], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("LLMQ_TIMEOUTS", json.dumps(value))
    with pytest.raises(ConfigError, match="timeouts"):
        Settings.from_env()


def test_a_variable_that_is_not_json_is_a_config_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("LLMQ_TIMEOUTS", "{heartbeat_s: 2")
    with pytest.raises(ConfigError, match="timeouts"):
        Settings.from_env()


def test_every_field_says_what_it_bounds_and_is_in_the_operations_table() -> None:
    page = OPERATIONS.read_text()
    for name, field in Timeouts.model_fields.items():
        assert field.description, f"{name} has no docstring"
        row = re.search(rf"^\| `{name}` \| `([^`]+)` \|", page, re.MULTILINE)
        assert row is not None, f"{name} is not in docs/operations.md"
        default = getattr(DEFAULT_TIMEOUTS, name)
        values = default if isinstance(default, tuple) else (default,)
        printed = [float(v) for v in row.group(1).strip("[]").split(",")]
        assert printed == [float(v) for v in values], f"{name}'s documented default"


def test_a_stream_reader_gives_up_after_its_reconnect_budget() -> None:
    now = [0.0]
    reader = StreamReader("j", clock=lambda: now[0], reconnect_budget_s=5.0)
    assert reader.connection_lost(ConnectionError("gone")) > 0
    now[0] = 5.5
    with pytest.raises(BrokerUnavailable):
        reader.connection_lost(ConnectionError("still gone"))
