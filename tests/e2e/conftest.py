"""One real worker process with the bundled model, shared by every end-to-end test."""

from __future__ import annotations

import socket
from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from producer.client import Client
from schemas.errors import EngineError
from schemas.queues import Tier
from schemas.settings import Settings
from tests.conftest import E2E_REDIS_DB, REDIS_BASE, postgres_database, truncate_jobs
from workers.supervise import start_worker_process, stop_process, wait_until_warm


def port_outside_ephemeral_range() -> int:
    """A free port below the kernel's ephemeral range. A port from ``bind(0)`` is free
    again once returned, and the worker's own engine, started before its metrics server,
    may be handed the same one for its sockets (seen once: "Address already in use")."""
    low = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    for port in range(low - 2000, low):
        with socket.socket() as sock:
            try:
                sock.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError("no free port below the ephemeral range")


WORKER_METRICS_PORT = port_outside_ephemeral_range()


@pytest.fixture(scope="session")
def e2e_settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    redis_url = f"{REDIS_BASE}/{E2E_REDIS_DB}"
    redis.Redis.from_url(redis_url).flushdb()
    database_url = postgres_database("llmq_e2e")
    truncate_jobs(database_url)
    # A deployment prompts folder, empty at start: tests register prompt versions there.
    prompts_dir = tmp_path_factory.mktemp("prompts")
    return Settings(broker_url=redis_url, database_url=database_url, prompts_dir=prompts_dir)


@pytest.fixture(scope="session")
def worker_log(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where the session worker's whole output (stdout and stderr) goes."""
    return tmp_path_factory.mktemp("worker") / "worker.log"


@pytest.fixture(scope="session")
def worker(e2e_settings: Settings, worker_log: Path) -> Iterator[str]:
    """Start ``llmq worker --tier small`` and wait until it reports warm; yield its id."""
    log_path = worker_log
    with log_path.open("wb") as log:
        process = start_worker_process(
            e2e_settings,
            Tier.SMALL,
            concurrency=8,
            output=log,
            metrics_port=WORKER_METRICS_PORT,
            env={"LLMQ_PROMPTS_DIR": str(e2e_settings.prompts_dir)},
        )
    try:
        yield wait_until_warm(e2e_settings, Tier.SMALL, process, timeout=600)
    except EngineError as exc:
        pytest.fail(f"{exc}:\n{log_path.read_text()[-4000:]}")
    finally:
        stop_process(process)


@pytest.fixture
def client(e2e_settings: Settings, worker: str) -> Iterator[Client]:
    with Client(e2e_settings) as c:
        yield c
