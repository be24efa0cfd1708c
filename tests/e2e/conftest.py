"""One real worker process with the bundled model, shared by every end-to-end test."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from producer.client import Client
from schemas.queues import WORKER_KEY_PREFIX
from schemas.settings import Settings
from tests.conftest import E2E_REDIS_DB, REDIS_BASE, postgres_database, truncate_jobs

WARM_TIMEOUT_S = 600.0


@pytest.fixture(scope="session")
def e2e_settings() -> Settings:
    redis_url = f"{REDIS_BASE}/{E2E_REDIS_DB}"
    redis.Redis.from_url(redis_url).flushdb()
    database_url = postgres_database("llmq_e2e")
    truncate_jobs(database_url)
    return Settings(broker_url=redis_url, database_url=database_url)


@pytest.fixture(scope="session")
def worker(e2e_settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    """Start ``llmq worker --tier small`` and wait until it reports warm; yield its id."""
    log_path = tmp_path_factory.mktemp("worker") / "worker.log"
    env = {
        **os.environ,
        "LLMQ_BROKER_URL": e2e_settings.broker_url,
        "LLMQ_DATABASE_URL": e2e_settings.database_url,
    }
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "producer.cli",
                "worker",
                "--tier",
                "small",
                "--concurrency",
                "8",
            ],
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        yield _wait_warm(e2e_settings, process, log_path)
    finally:
        process.terminate()
        try:
            process.wait(timeout=60)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def _wait_warm(settings: Settings, process: subprocess.Popen[bytes], log_path: Path) -> str:
    client = redis.Redis.from_url(settings.broker_url)
    deadline = time.monotonic() + WARM_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"worker exited with {process.returncode}:\n{log_path.read_text()[-4000:]}")
        for key in client.scan_iter(match=f"{WORKER_KEY_PREFIX}small-{process.pid}@*"):
            if client.hget(key, "warm") == b"1":
                return key.decode().removeprefix(WORKER_KEY_PREFIX)
        time.sleep(0.5)
    pytest.fail(f"worker not warm after {WARM_TIMEOUT_S}s:\n{log_path.read_text()[-4000:]}")


@pytest.fixture
def client(e2e_settings: Settings, worker: str) -> Iterator[Client]:
    with Client(e2e_settings) as c:
        yield c
