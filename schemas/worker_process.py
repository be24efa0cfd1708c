"""Starting ``llmq worker`` as a child process, waiting until its engine is warm, and
stopping it: the one spawner of ``llmq up``, the benchmarks, the tests and the A/B
gate's blocks (``producer.quality.blocks``), which cannot import ``workers``."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Collection, Mapping
from typing import IO

from schemas.broker import redis_client
from schemas.errors import EngineError
from schemas.queues import Tier
from schemas.registry import read_entries
from schemas.settings import Settings
from schemas.timeouts import DEFAULT_TIMEOUTS

WARM_TIMEOUT_S = DEFAULT_TIMEOUTS.worker_warm_s
"""The default of ``settings.timeouts.worker_warm_s``."""


def start_worker_process(
    settings: Settings,
    tier: Tier,
    *,
    concurrency: int | None = None,
    output: IO[bytes] | None = None,
    metrics_port: int | None = None,
    env: Mapping[str, str] | None = None,
    unset: Collection[str] = (),
    stdin: int | None = None,
    own_group: bool = False,
) -> subprocess.Popen[bytes]:
    """Run ``llmq worker --tier <tier>`` against ``settings``' broker and database.

    ``env`` adds variables and ``unset`` names those of this process's environment the
    worker does not inherit; ``stdin`` is the worker's standard input (None: this
    process's); with ``own_group`` the worker and its engine processes form a process
    group, so :func:`kill_group` can crash them all at once.
    """
    command = [sys.executable, "-m", "producer.cli", "worker", "--tier", tier.value]
    if concurrency:
        command += ["--concurrency", str(concurrency)]
    if metrics_port is not None:
        command += ["--metrics-port", str(metrics_port)]
    variables = {
        **{key: value for key, value in os.environ.items() if key not in unset},
        "LLMQ_BROKER_URL": settings.broker_url,
        "LLMQ_DATABASE_URL": settings.database_url,
        **(env or {}),
    }
    return subprocess.Popen(
        command,
        env=variables,
        stdin=stdin,
        stdout=output,
        stderr=subprocess.STDOUT,
        start_new_session=own_group,
    )


def kill_group(process: subprocess.Popen[bytes]) -> None:
    """SIGKILL a worker started with ``own_group`` and its engine processes: a crash."""
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGKILL)
    process.wait()


def wait_until_warm(
    settings: Settings,
    tier: Tier,
    process: subprocess.Popen[bytes],
    *,
    timeout: float | None = None,
    on_phase: Callable[[str], None] | None = None,
) -> str:
    """Block until the worker reports warm, for ``timeout`` seconds at most (None:
    ``settings.timeouts.worker_warm_s``); return its id. Raises ``EngineError``.

    ``on_phase`` hears each warming phase the worker reports (loading, warm-up, ...).
    """
    client = redis_client(settings.broker_url)
    # Worker ids are <tier>-<pid>-<random>@<host>: this process's worker, whatever else runs.
    prefix = f"{tier.value}-{process.pid}-"
    if timeout is None:
        timeout = settings.timeouts.worker_warm_s
    deadline = time.monotonic() + timeout
    try:
        while time.monotonic() < deadline:
            if process.poll() is not None:
                raise EngineError(f"the worker exited with code {process.returncode}")
            for entry in read_entries(client):
                if not entry.worker_id.startswith(prefix) or "@" not in entry.worker_id:
                    continue
                if entry.warm:
                    return entry.worker_id
                if on_phase is not None and entry.phase:
                    on_phase(entry.phase)
            time.sleep(0.25)
    finally:
        client.close()
    raise EngineError(f"the worker was not warm after {timeout:.0f} s")


def stop_process(process: subprocess.Popen[bytes], *, grace_s: float = 60.0) -> None:
    """Ask politely (SIGTERM: finish running jobs), then insist."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace_s)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
