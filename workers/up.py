"""``llmq up``: Redis, the database, the bundled model and one warm worker, locally."""

from __future__ import annotations

import contextlib
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from urllib.parse import urlparse

import redis

from schemas.boundary import redact_url
from schemas.broker import redis_client
from schemas.errors import BrokerUnavailable, EngineError
from schemas.queues import Tier
from schemas.settings import Settings
from workers.models import resolve_model
from workers.supervise import start_worker_process, stop_process, wait_until_warm

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def run_up(settings: Settings, *, tier: Tier, concurrency: int | None) -> int:
    """Bring the stack up, wait for the worker to be warm, serve until Ctrl-C (or SIGTERM)."""
    # Stop the same way on Ctrl-C and on SIGTERM from a supervisor, even when started
    # from a shell that ignores SIGINT for background jobs.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    with local_redis(settings.broker_url):
        _run(["db", "upgrade"])
        say(f"database ready: {settings.database_url}")
        say(f"model ready: {resolve_model(settings.tier(tier).model, settings.bundled_model_dir)}")
        worker = start_worker_process(settings, tier, concurrency=concurrency)
        try:
            say(
                f"starting a {tier} worker; its engine loads and warms up (about a minute on a CPU)"
            )
            wait_until_warm(settings, tier, worker)
            say(f"llmq is up: one warm {tier} worker. Try:  llmq submit 'Where is my order?'")
            say("Ctrl-C stops everything.")
            return worker.wait()
        except KeyboardInterrupt:
            say("stopping the worker (it finishes what it is running)...")
            return 0
        finally:
            stop_process(worker)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def say(message: str) -> None:
    print(f"llmq up: {message}", flush=True)


@contextlib.contextmanager
def local_redis(url: str) -> Iterator[None]:
    """Use Redis at ``url``; if none answers on a local address, run one until exit."""
    if _redis_answers(url):
        say(f"using Redis at {redact_url(url)}")
        yield
        return
    parsed = urlparse(url)
    binary = shutil.which("redis-server")
    if parsed.hostname not in LOCAL_HOSTS or binary is None:
        raise BrokerUnavailable(
            f"Redis is not reachable at {redact_url(url)}, and "
            + ("it is not a local address" if binary else "no redis-server binary is installed")
            + "; start Redis or set LLMQ_BROKER_URL"
        )
    port = str(parsed.port or 6379)
    server = subprocess.Popen(
        [binary, "--port", port, "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"],
        stdout=subprocess.DEVNULL,
    )
    try:
        _wait_for(lambda: _redis_answers(url), 10.0, "redis-server did not start")
        say(f"no Redis answered at {url}: started {binary} on port {port} (pid {server.pid})")
        yield
    finally:
        server.terminate()
        server.wait(timeout=10)
        say("stopped the redis-server it started")


def _redis_answers(url: str) -> bool:
    try:
        return bool(redis_client(url, socket_connect_timeout=1).ping())
    except redis.RedisError:
        return False


def _wait_for(check: Callable[[], bool], timeout: float, failure: str) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if check():
            return
        time.sleep(0.5)
    raise EngineError(failure)


def _run(args: list[str]) -> None:
    subprocess.run([sys.executable, "-m", "producer.cli", *args], check=True)
