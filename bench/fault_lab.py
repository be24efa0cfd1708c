"""The lab ``llmq bench faults`` crashes things in: a private ``redis-server`` (restarted
on purpose, never a shared one), a job database and real workers on the bundled model,
each in its own process group so that a kill takes its engine down with it, as a crash
does; and :class:`Listener`, a client that follows one job's stream impatiently.
"""

from __future__ import annotations

import contextlib
import random
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.redis_server import RedisServer
from bench.sentinel_lab import SentinelLab
from producer.client import Client
from schemas.errors import EngineError, LlmqError
from schemas.events import (
    AnyEvent,
    AttemptEvent,
    FinalEvent,
    TokenEvent,
    is_terminal,
)
from schemas.queues import Tier
from schemas.settings import Settings
from schemas.tables import Job
from workers.supervise import kill_group, start_worker_process, stop_process, wait_until_warm
from workers.worker import worker_pid

TIER = Tier.SMALL
JOB_TIMEOUT_S = 300.0
# How long a job may wait for its (next) first token before it counts as stalled.
STALL_TIMEOUT_S = 120.0


@dataclass
class Lab:
    """A private Redis, a job database and the worker processes serving one tier."""

    settings: Settings
    redis_server: RedisServer | None
    scratch: Path
    max_attempts: int
    concurrency: int
    prefill_prompts: bool = True
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    logs: dict[int, Path] = field(default_factory=dict)
    started: int = 0

    def start_worker(self) -> subprocess.Popen[bytes]:
        """Start one more worker; it warms in the background."""
        self.started += 1
        log_path = self.scratch / f"worker-{self.started}.log"
        log_file = log_path.open("wb")
        process = start_worker_process(
            self.settings,
            TIER,
            concurrency=self.concurrency,
            output=log_file,
            env={
                "LLMQ_MAX_ATTEMPTS": str(self.max_attempts),
                "LLMQ_PREFILL_PROMPTS": "1" if self.prefill_prompts else "0",
            },
            own_group=True,
        )
        log_file.close()
        self.processes[process.pid] = process
        self.logs[process.pid] = log_path
        return process

    def wait_warm(self, process: subprocess.Popen[bytes]) -> str:
        """The worker's id once warm; a worker that dies first is a broken lab."""
        try:
            return wait_until_warm(self.settings, TIER, process, timeout=900)
        except EngineError as exc:
            tail = self.logs[process.pid].read_text(errors="replace")[-3000:]
            raise EngineError(f"{exc}; the end of its log:\n{tail}") from exc

    def kill(self, worker_id: str) -> None:
        """Crash the worker ``worker_id`` and its engine with SIGKILL."""
        kill_group(self.processes.pop(worker_pid(worker_id)))

    def alive(self) -> int:
        return sum(1 for process in self.processes.values() if process.poll() is None)

    def job(self, client: Client, job_id: str) -> Job:
        with client.sessions() as session:
            job = session.get(Job, job_id)
        assert job is not None
        return job


@contextlib.contextmanager
def fault_lab(
    settings: Settings,
    *,
    workers: int = 2,
    concurrency: int = 4,
    max_attempts: int = 2,
    sentinels: SentinelLab | None = None,
    logs_dir: Path | None = None,
    prefill_prompts: bool = True,
) -> Iterator[Lab]:
    """Start a private Redis (or use ``sentinels``) and ``workers`` warm workers.

    Everything is torn down after; with ``logs_dir``, the workers' logs are kept there.
    ``prefill_prompts=False`` starts workers (and their replacements) without
    prefilling system prompts: sooner, where no request uses one.
    """
    import migrations

    with tempfile.TemporaryDirectory(prefix="llmq-faults-") as scratch:
        folder = Path(scratch)
        server = None if sentinels is not None else RedisServer(folder)
        if server is not None:
            server.start()
        database_url = settings.database_url
        if database_url == Settings.model_fields["database_url"].default:
            database_url = f"sqlite:///{folder / 'faults.db'}"
        lab_settings = settings.model_copy(
            update={
                "broker_url": server.url if server is not None else _sentinel_url(sentinels),
                "database_url": database_url,
                "max_attempts": max_attempts,
            }
        )
        migrations.upgrade(lab_settings.database_url)
        lab = Lab(lab_settings, server, folder, max_attempts, concurrency, prefill_prompts)
        try:
            started = [lab.start_worker() for _ in range(workers)]
            for process in started:
                lab.wait_warm(process)
            yield lab
        finally:
            for process in list(lab.processes.values()):
                stop_process(process, grace_s=20)
            if server is not None:
                server.stop()
            if logs_dir is not None:
                _keep_logs(folder, logs_dir)


def _sentinel_url(sentinels: SentinelLab | None) -> str:
    assert sentinels is not None
    return sentinels.url


def _keep_logs(scratch: Path, logs_dir: Path) -> None:
    logs_dir.mkdir(parents=True, exist_ok=True)
    for log_file in scratch.glob("worker-*.log"):
        shutil.copy(log_file, logs_dir / f"{scratch.name}-{log_file.name}")


def long_request(index: int, max_tokens: int) -> dict[str, Any]:
    """A request that streams long enough to be killed in the middle."""
    return {
        "messages": [{"role": "user", "content": f"Tell a long story about fox number {index}."}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }


class Listener:
    """Follows one job's stream like an impatient client: it drops the connection at
    random points and reconnects from a random earlier sequence number.

    It checks that each connection delivers consecutive sequence numbers starting where
    it asked, that every event equals the one seen before at that number, and that the
    text adds up to the final text, across worker crashes and new attempts.
    """

    def __init__(self, client: Client, job_id: str, rng: random.Random) -> None:
        self.client = client
        self.job_id = job_id
        self.rng = rng
        self.events: dict[int, AnyEvent] = {}
        self.first_seen: dict[int, float] = {}
        self.killed_at: float | None = None
        self.reconnects = 0
        self.gaps = 0
        self.dups = 0
        self.error: str | None = None
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    @property
    def streamed(self) -> bool:
        return any(isinstance(event, TokenEvent) for event in self.events.values())

    @property
    def final(self) -> FinalEvent | None:
        finals = [e for e in self.events.values() if isinstance(e, FinalEvent)]
        return finals[0] if finals else None

    @property
    def text(self) -> str:
        ordered = sorted(self.events.items())
        return "".join(e.text for _, e in ordered if isinstance(e, TokenEvent))

    def recovery_s(self) -> float | None:
        """From its worker's death to the next new token it received; None if none came."""
        if self.killed_at is None:
            return None
        after = [
            seen
            for seq, seen in self.first_seen.items()
            if seen >= self.killed_at and isinstance(self.events.get(seq), TokenEvent)
        ]
        return min(after) - self.killed_at if after else None

    @property
    def attempts_seen(self) -> int:
        return 1 + sum(isinstance(e, AttemptEvent) for e in self.events.values())

    def _run(self) -> None:
        start = 0
        deadline = time.monotonic() + JOB_TIMEOUT_S
        try:
            while True:
                remaining = deadline - time.monotonic()
                if self._connection(start, self.rng.randint(3, 12), remaining):
                    return
                self.reconnects += 1
                start = self.rng.randint(0, max(self.events, default=0) + 1)
        except (LlmqError, TimeoutError) as exc:
            self.error = f"{exc.__class__.__name__}: {exc}"

    def _connection(self, start: int, budget: int, timeout: float) -> bool:
        """Read up to ``budget`` events from ``start``; True once the terminal one came."""
        expected = start
        with contextlib.closing(
            self.client.events(self.job_id, from_seq=start, timeout=timeout)
        ) as events:
            return self._take(events, expected, budget)

    def _take(self, events: Iterator[AnyEvent], expected: int, budget: int) -> bool:
        for count, event in enumerate(events, start=1):
            if event.seq < expected:
                self.dups += 1
            elif event.seq > expected:
                self.gaps += event.seq - expected
            expected = event.seq + 1
            if event.seq not in self.events:
                self.first_seen[event.seq] = time.monotonic()
            known = self.events.setdefault(event.seq, event)
            if known != event:
                self.dups += 1  # two different events under one number
            if is_terminal(event):
                return True
            if count >= budget:
                return False
        return True
