"""Broker and database errors become short llmq errors that leak nothing."""

from __future__ import annotations

import logging

import pytest
import redis
from kombu.exceptions import OperationalError as KombuOperationalError
from sqlalchemy import exc as sa_exc

from schemas.boundary import (
    broker_boundary,
    broker_error,
    database_boundary,
    database_error,
    redact_url,
)
from schemas.errors import BrokerUnavailable, DatabaseUnavailable

SECRETS = ("s3cret", "127.0.0.1:1", "10.0.0.5", "SELECT", "hash-of-key", "alice")


def assert_safe(message: str) -> None:
    for secret in SECRETS:
        assert secret not in message, message


def redis_refused() -> redis.ConnectionError:
    return redis.ConnectionError(
        "Error 111 connecting to 127.0.0.1:1 (redis://:s3cret@127.0.0.1:1/0). Refused."
    )


def kombu_wrapped() -> KombuOperationalError:
    try:
        try:
            raise redis_refused()
        except redis.ConnectionError as inner:
            raise KombuOperationalError(str(inner)) from inner
    except KombuOperationalError as outer:
        return outer


def sql_failure(kind: type[sa_exc.DBAPIError], orig: str) -> sa_exc.DBAPIError:
    return kind(
        "SELECT api_keys.id FROM api_keys WHERE api_keys.key_hash = %(h)s",
        {"h": "hash-of-key"},
        Exception(orig),
    )


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (redis_refused(), "Redis is unreachable"),
        (redis.AuthenticationError("WRONGPASS for alice s3cret"), "refused the credentials"),
        (redis.TimeoutError("Timeout reading from 10.0.0.5:6379"), "did not answer in time"),
        (redis.ReadOnlyError("You can't write against a read only replica."), "read-only"),
        (kombu_wrapped(), "Redis is unreachable"),
        (ConnectionRefusedError(111, "Connection refused 127.0.0.1:1"), "Redis is unreachable"),
    ],
)
def test_broker_errors_say_what_failed_and_nothing_else(exc: Exception, reason: str) -> None:
    error = broker_error(exc, doing="enqueue the job", then="nothing was enqueued")
    assert isinstance(error, BrokerUnavailable)
    assert str(error).startswith("could not enqueue the job: ")
    assert reason in str(error)
    assert str(error).endswith("; nothing was enqueued")
    assert_safe(str(error))


@pytest.mark.parametrize(
    ("exc", "reason"),
    [
        (
            sql_failure(
                sa_exc.OperationalError,
                'connection to server at "10.0.0.5", port 5432 failed: password for alice',
            ),
            "unreachable",
        ),
        (sql_failure(sa_exc.OperationalError, "no such table: api_keys"), "llmq db upgrade"),
        (sql_failure(sa_exc.ProgrammingError, 'relation "api_keys" does not exist'), "upgrade"),
        (sql_failure(sa_exc.IntegrityError, "duplicate key hash-of-key"), "refused the write"),
        (sa_exc.TimeoutError("QueuePool limit of size 20 reached, host 10.0.0.5"), "in time"),
    ],
)
def test_database_errors_say_what_failed_and_nothing_else(
    exc: sa_exc.SQLAlchemyError, reason: str
) -> None:
    error = database_error(exc, doing="check the API key")
    assert isinstance(error, DatabaseUnavailable)
    assert str(error).startswith("could not check the API key: ")
    assert reason in str(error)
    assert_safe(str(error))


def test_the_full_detail_goes_to_the_debug_log(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.DEBUG, logger="schemas.boundary"):
        broker_error(redis_refused(), doing="reach Redis")
    assert "127.0.0.1:1" in caplog.text  # operators still see what happened


def test_boundaries_translate_and_chain_the_cause() -> None:
    with pytest.raises(BrokerUnavailable) as broker, broker_boundary("ping"):
        raise redis_refused()
    assert isinstance(broker.value.__cause__, redis.ConnectionError)
    with pytest.raises(DatabaseUnavailable) as database, database_boundary("read job x"):
        raise sql_failure(sa_exc.OperationalError, "server closed the connection")
    assert str(database.value).startswith("could not read job x: ")
    with pytest.raises(ValueError, match="not ours"), database_boundary("read job x"):
        raise ValueError("not ours")  # anything else passes through untouched


@pytest.mark.parametrize(
    ("url", "shown"),
    [
        ("redis://:s3cret@127.0.0.1:6379/0", "redis://***@127.0.0.1:6379/0"),
        ("redis://127.0.0.1:6379/0", "redis://127.0.0.1:6379/0"),
        (
            "sentinel://alice:s3cret@h1:26379;sentinel://h2:26379/0?sentinel_password=s3cret",
            "sentinel://***@h1:26379;sentinel://h2:26379/0",
        ),
        ("unix:///run/redis.sock", "unix:///run/redis.sock"),
    ],
)
def test_redact_url_hides_credentials(url: str, shown: str) -> None:
    assert redact_url(url) == shown
