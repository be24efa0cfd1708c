"""``llmq flower`` is never open by accident and keeps its secrets out of ``ps``."""

from __future__ import annotations

from pathlib import Path

import pytest

from producer.cli import main
from producer.gateway.cli import flower_basic_auth, flower_launch, is_loopback
from schemas.errors import ConfigError

BROKER = "redis://:s3cret@redis:6379/0"


@pytest.mark.parametrize("address", ["0.0.0.0", "::", "10.0.0.5", "flower.internal", ""])
def test_a_public_address_without_credentials_is_refused(address: str) -> None:
    with pytest.raises(ConfigError, match="LLMQ_FLOWER_BASIC_AUTH=user:password"):
        flower_launch(BROKER, port=5555, address=address, basic_auth=None, env={})


@pytest.mark.parametrize("address", ["127.0.0.1", "127.0.0.2", "::1", "[::1]", "localhost"])
def test_loopback_may_run_without_credentials(address: str) -> None:
    assert is_loopback(address)
    _command, env = flower_launch(BROKER, port=5555, address=address, basic_auth=None, env={})
    assert env["FLOWER_UNAUTHENTICATED_API"] == "true"
    assert "FLOWER_BASIC_AUTH" not in env


def test_credentials_and_broker_travel_in_the_environment_not_the_arguments() -> None:
    command, env = flower_launch(
        BROKER,
        port=5555,
        address="0.0.0.0",
        basic_auth="ops:pa55word",
        env={"FLOWER_UNAUTHENTICATED_API": "true", "PATH": "/bin"},
    )
    assert not any("pa55word" in part or "s3cret" in part for part in command)
    assert "--address=0.0.0.0" in command
    assert env["FLOWER_BASIC_AUTH"] == "ops:pa55word"
    assert env["CELERY_BROKER_URL"] == BROKER
    assert "FLOWER_UNAUTHENTICATED_API" not in env  # credentials given: the API needs them
    assert env["PATH"] == "/bin"


def test_an_auth_provider_counts_as_authentication() -> None:
    env = {"FLOWER_AUTH_PROVIDER": "flower.views.auth.GithubLoginHandler"}
    _command, child = flower_launch(BROKER, port=1, address="0.0.0.0", basic_auth=None, env=env)
    assert "FLOWER_UNAUTHENTICATED_API" not in child


def test_credentials_come_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert flower_basic_auth({}) is None
    assert flower_basic_auth({"LLMQ_FLOWER_BASIC_AUTH": "ops:pw"}) == "ops:pw"
    assert flower_basic_auth({"FLOWER_BASIC_AUTH": "a:b,c:d"}) == "a:b,c:d"
    secret_file = tmp_path / "flower-auth"
    secret_file.write_text("ops:from-file\n")
    env = {"LLMQ_FLOWER_BASIC_AUTH": "ops:pw"}
    assert flower_basic_auth(env, file=secret_file) == "ops:from-file"


@pytest.mark.parametrize("value", ["admin", ":pw", "admin:", "a:b,broken"])
def test_malformed_credentials_are_refused_without_repeating_them(value: str) -> None:
    with pytest.raises(ConfigError, match="must hold user:password") as error:
        flower_basic_auth({"LLMQ_FLOWER_BASIC_AUTH": value})
    assert value not in str(error.value)


def test_a_missing_credentials_file_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="cannot read the Flower credentials file"):
        flower_basic_auth({}, file=tmp_path / "missing")


def test_the_command_refuses_public_flower_and_argument_passwords(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.delenv("LLMQ_FLOWER_BASIC_AUTH", raising=False)
    monkeypatch.delenv("FLOWER_BASIC_AUTH", raising=False)
    monkeypatch.delenv("FLOWER_AUTH_PROVIDER", raising=False)
    assert main(["flower", "--address", "0.0.0.0"]) == 1
    assert "refusing to serve Flower on 0.0.0.0" in capsys.readouterr().err
    assert main(["flower", "--basic-auth", "admin:hunter2"]) == 1
    err = capsys.readouterr().err
    assert "--basic-auth is no longer accepted" in err and "hunter2" not in err
