"""``llmq up``: Redis, the database, the bundled models and warm workers, locally.

One worker by default (the default tier); ``--tiers small,large`` or ``--tiers all``
serves several tiers from one host, one worker each, warmed one after another and with
the host's memory split between their engines (``workers.memory_split``);
``--tiers small,embed`` adds the embedding tier's worker, which has no engine to share
memory with.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urlparse

import psutil
import redis

from schemas.boundary import redact_url
from schemas.broker import redis_client
from schemas.errors import BrokerUnavailable, EngineError, LlmqError
from schemas.queues import Tier
from schemas.settings import Settings
from workers.console import StartupView, default_log_path, explain_notes, output_to_file
from workers.memory_split import split_memory
from workers.models import resolve_model
from workers.supervise import start_worker_process, stop_process, wait_until_warm

LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}


def run_up(
    settings: Settings,
    *,
    tiers: Sequence[Tier],
    concurrency: int | None,
    verbose: bool = False,
) -> int:
    """Bring the stack up, wait for each tier's worker to be warm, serve until Ctrl-C
    (or SIGTERM). Raises ``ConfigError`` when the host's memory cannot hold the engines.

    Unless ``verbose``, everything the database migration, the model conversion and the
    worker (with its engine processes) print goes to a log file; the terminal gets a few
    lines and one live line while the engine warms.
    """
    # Stop the same way on Ctrl-C and on SIGTERM from a supervisor, even when started
    # from a shell that ignores SIGINT for background jobs.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    # A closed terminal must not leave the worker and its engine running.
    signal.signal(signal.SIGHUP, _interrupt)
    if verbose:
        return _serve(settings, tiers, concurrency, StartupView(sys.stdout, prefix="llmq up"))
    log_path = default_log_path(settings.model_cache_dir / "logs", "up")
    with output_to_file(log_path) as terminal:
        view = StartupView(terminal, prefix="llmq up")
        view.say(f"logs go to {log_path} (--verbose shows them here)")
        try:
            return _serve(settings, tiers, concurrency, view, log_path=log_path)
        except LlmqError:
            view.say(f"failed; the full log is {log_path}")
            raise


def _serve(
    settings: Settings,
    tiers: Sequence[Tier],
    concurrency: int | None,
    view: StartupView,
    *,
    log_path: Path | None = None,
) -> int:
    # The embedding tier has no vLLM engine: it takes no share of the engines' memory.
    env = _split_env(settings, [tier for tier in tiers if tier != Tier.EMBED])
    workers: list[subprocess.Popen[bytes]] = []
    with local_redis(settings.broker_url, say=view.say):
        _run(["db", "upgrade"])
        view.say(f"database ready: {redact_url(settings.database_url)}")
        try:
            # One engine warming at a time: two at once fight for the same cores.
            for tier in tiers:
                if tier != Tier.EMBED:
                    model = resolve_model(settings.tier(tier).model, settings.bundled_model_dir)
                    view.say(f"model ready for {tier}: {model}")
                worker = start_worker_process(settings, tier, concurrency=concurrency, env=env)
                workers.append(worker)
                view.warming(f"{tier} worker")
                wait_until_warm(settings, tier, worker, on_phase=view.phase)
                took = view.done()
                view.say(f"{tier} worker warm (in {took:.0f} s)")
            names = ", ".join(str(tier) for tier in tiers)
            view.say(f"ready: one warm worker for each of {names}. Try:")
            view.say("  llmq submit 'Where is my order?'   # streams an answer")
            view.say("  llmq top                           # queues, workers, latency, live")
            if Tier.EMBED in tiers:
                view.say("  llmq gateway, then POST /v1/embeddings with model embed")
            if log_path is not None and (note := explain_notes(log_path)):
                view.say(f"note: {note}")
            view.say("Ctrl-C stops everything.")
            return _wait_any(workers)
        except KeyboardInterrupt:
            view.done()
            view.say("stopping the workers (each finishes what it is running)...")
            return 0
        finally:
            view.done()
            for worker in workers:
                stop_process(worker)


def _split_env(settings: Settings, tiers: Sequence[Tier]) -> dict[str, str] | None:
    """The workers' environment: for several tiers, a tier table with memory split."""
    if len(tiers) <= 1:
        return None
    from workers.engine.vllm import CPU_KV_CACHE_GB, running_on_cpu

    split = split_memory(
        tiers,
        dict(settings.tiers),
        on_cpu=running_on_cpu(),
        cpu_default_kv_gb=CPU_KV_CACHE_GB,
        available_gb=psutil.virtual_memory().available / 2**30,
    )
    table = {str(tier): config.model_dump(mode="json") for tier, config in settings.tiers.items()}
    table |= {str(tier): config.model_dump(mode="json") for tier, config in split.items()}
    folder = settings.model_cache_dir.expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "up-tiers.json"
    path.write_text(json.dumps(table, indent=2))
    return {"LLMQ_TIERS_FILE": str(path)}


def _wait_any(workers: Sequence[subprocess.Popen[bytes]]) -> int:
    """Serve until a worker exits; its exit status (the others are stopped after)."""
    while True:
        for worker in workers:
            code = worker.poll()
            if code is not None:
                return code
        time.sleep(1.0)


def _interrupt(_signum: int, _frame: object) -> None:
    raise KeyboardInterrupt


def _print(message: str) -> None:
    print(f"llmq up: {message}", flush=True)


@contextlib.contextmanager
def local_redis(url: str, *, say: Callable[[str], None] = _print) -> Iterator[None]:
    """Use Redis at ``url``; if none answers on a local address, run one until exit."""
    if _redis_answers(url):
        say(f"Redis found at {redact_url(url)}")
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
        say(f"no Redis answered at {redact_url(url)}: started redis-server on port {port}")
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
    done = subprocess.run(
        [sys.executable, "-m", "producer.cli", *args], check=False, capture_output=True, text=True
    )
    # Its output goes to the log (the terminal only with --verbose).
    print(done.stdout + done.stderr, flush=True)
    if done.returncode:
        raise LlmqError(f"llmq {' '.join(args)} failed: {done.stderr.strip() or done.stdout}")
