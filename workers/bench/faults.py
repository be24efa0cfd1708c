"""``llmq bench faults``: crash workers and Redis under load, count what was lost.

Everything runs in a lab of its own: a private ``redis-server`` (restarted on purpose,
never a shared one) and real workers on the bundled model, each in its own process
group so that a kill takes its engine down with it, as a crash does.
"""

from __future__ import annotations

import contextlib
import logging
import random
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from producer.client import Client
from schemas.errors import BrokerUnavailable, JobFailed, JobTimeout, LlmqError
from schemas.events import (
    AnyEvent,
    AttemptEvent,
    FinalEvent,
    TokenEvent,
    is_terminal,
    parse_event,
)
from schemas.jobs import JobStatus
from schemas.queues import Priority, Tier, event_log_key, queue_name
from schemas.settings import Settings
from schemas.tables import Job
from workers.bench.fuzz import find_request_crashes, push_raw_payloads
from workers.bench.fuzz import fuzz_cases as draw_fuzz_cases
from workers.bench.redis_server import RedisServer
from workers.supervise import kill_group, start_worker_process, stop_process, wait_until_warm
from workers.worker import worker_pid

log = logging.getLogger(__name__)

TIER = Tier.SMALL
JOB_TIMEOUT_S = 300.0


@dataclass
class Lab:
    """A private Redis, a job database and the worker processes serving one tier."""

    settings: Settings
    redis_server: RedisServer
    scratch: Path
    max_attempts: int
    concurrency: int
    processes: dict[int, subprocess.Popen[bytes]] = field(default_factory=dict)
    started: int = 0

    def start_worker(self) -> subprocess.Popen[bytes]:
        """Start one more worker; it warms in the background."""
        self.started += 1
        log_file = (self.scratch / f"worker-{self.started}.log").open("wb")
        process = start_worker_process(
            self.settings,
            TIER,
            concurrency=self.concurrency,
            output=log_file,
            env={"LLMQ_MAX_ATTEMPTS": str(self.max_attempts)},
            own_group=True,
        )
        log_file.close()
        self.processes[process.pid] = process
        return process

    def wait_warm(self, process: subprocess.Popen[bytes]) -> str:
        return wait_until_warm(self.settings, TIER, process, timeout=900)

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
    settings: Settings, *, workers: int = 2, concurrency: int = 4, max_attempts: int = 2
) -> Iterator[Lab]:
    """Start a private Redis and ``workers`` warm workers; tear everything down after."""
    import migrations

    with tempfile.TemporaryDirectory(prefix="llmq-faults-") as scratch:
        folder = Path(scratch)
        server = RedisServer(folder)
        server.start()
        database_url = settings.database_url
        if database_url == Settings.model_fields["database_url"].default:
            database_url = f"sqlite:///{folder / 'faults.db'}"
        lab_settings = settings.model_copy(
            update={
                "broker_url": server.url,
                "database_url": database_url,
                "max_attempts": max_attempts,
            }
        )
        migrations.upgrade(lab_settings.database_url)
        lab = Lab(lab_settings, server, folder, max_attempts, concurrency)
        try:
            started = [lab.start_worker() for _ in range(workers)]
            for process in started:
                lab.wait_warm(process)
            yield lab
        finally:
            for process in list(lab.processes.values()):
                stop_process(process, grace_s=20)
            server.stop()


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
            known = self.events.setdefault(event.seq, event)
            if known != event:
                self.dups += 1  # two different events under one number
            if is_terminal(event):
                return True
            if count >= budget:
                return False
        return True


@dataclass
class KillReport:
    kills: int = 0
    jobs: int = 0
    jobs_lost: int = 0
    duplicate_results: int = 0
    stream_gaps: int = 0
    stream_dups: int = 0
    incoherent_texts: int = 0
    reconnects: int = 0
    resumed_attempts: int = 0
    job_ids: list[str] = field(default_factory=list)


def kill_loop(lab: Lab, client: Client, *, kills: int, max_tokens: int, seed: int) -> KillReport:
    """``kills`` times: start a job, kill its worker after its first token, restart it.

    A surviving worker takes the job over; the killed one comes back warm before the
    next round, so there are always two.
    """
    rng = random.Random(seed)
    report = KillReport()
    listeners: list[Listener] = []
    for index in range(kills):
        handle = client.submit(long_request(index, max_tokens), tier=TIER)
        listener = Listener(client, handle.job_id, rng)
        listeners.append(listener)
        victim = _first_token_worker(lab, client, listener)
        if victim is not None:
            lab.kill(victim)
            report.kills += 1
        replacement = lab.start_worker()
        listener.join(JOB_TIMEOUT_S)
        lab.wait_warm(replacement)
    for listener in listeners:
        _score(lab, client, listener, report)
    return report


def _first_token_worker(lab: Lab, client: Client, listener: Listener) -> str | None:
    """The worker running the job once it has streamed; None if it finished first."""
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        row = lab.job(client, listener.job_id)
        if JobStatus(row.status).is_final:
            return None
        if listener.streamed and row.status == JobStatus.RUNNING and row.worker_id:
            return row.worker_id
        time.sleep(0.02)
    raise TimeoutError(f"job {listener.job_id} never started streaming")


def _score(lab: Lab, client: Client, listener: Listener, report: KillReport) -> None:
    report.jobs += 1
    report.job_ids.append(listener.job_id)
    report.reconnects += listener.reconnects
    report.stream_gaps += listener.gaps
    report.stream_dups += listener.dups
    report.resumed_attempts += listener.attempts_seen - 1
    row = lab.job(client, listener.job_id)
    final = listener.final
    if row.status != JobStatus.DONE or final is None:
        log.error("job %s lost: %s %s", listener.job_id, row.status, listener.error)
        report.jobs_lost += 1
        return
    terminals = _terminal_events_in_log(client, listener.job_id)
    report.duplicate_results += max(0, terminals - 1)
    if not (listener.text == final.text == row.output_text):
        report.incoherent_texts += 1


def _terminal_events_in_log(client: Client, job_id: str) -> int:
    raw_events = client.redis.lrange(event_log_key(job_id), 0, -1)
    return sum(is_terminal(parse_event(raw)) for raw in raw_events)


@dataclass
class RestartReport:
    restarts: int = 0
    acknowledged: int = 0
    refused: int = 0
    jobs_lost: int = 0


def redis_restart(
    lab: Lab, client: Client, *, jobs: int, max_tokens: int, down_s: float = 2.0
) -> RestartReport:
    """Submit ``jobs`` jobs at a steady pace and crash Redis (no persistence) half way.

    Submits that fail while Redis is down were refused (the caller knows); every job
    that ``submit`` accepted must still end done.
    """
    report = RestartReport()
    handles = []
    crash = threading.Thread(target=lab.redis_server.restart, kwargs={"down_s": down_s})
    for index in range(jobs):
        if index == jobs // 2:
            crash.start()  # submitting goes on while Redis is down
            report.restarts += 1
        try:
            handles.append(client.submit(long_request(index, max_tokens), tier=TIER))
        except BrokerUnavailable:
            report.refused += 1
        time.sleep(0.1)
    crash.join()
    report.acknowledged = len(handles)
    for handle in handles:
        try:
            handle.result(timeout=JOB_TIMEOUT_S)
        except (JobFailed, JobTimeout, BrokerUnavailable) as exc:
            log.error("job %s lost across the Redis restart: %s", handle.job_id, exc)
            report.jobs_lost += 1
    return report


def poison_job(lab: Lab, client: Client, *, max_tokens: int) -> bool:
    """A job whose worker dies on every attempt; True if it ends dead-lettered."""
    handle = client.submit(long_request(999, max_tokens), tier=TIER)
    replacements = []
    for attempt in range(1, lab.max_attempts + 1):
        worker_id = _running_attempt(lab, client, handle.job_id, attempt)
        lab.kill(worker_id)
        replacements.append(lab.start_worker())
    # Every worker that met the job is dead: a replacement's reaper must find it.
    for process in replacements:
        lab.wait_warm(process)
    deadline = time.monotonic() + 60.0
    status = JobStatus(lab.job(client, handle.job_id).status)
    while status is not JobStatus.DEAD_LETTER and time.monotonic() < deadline:
        time.sleep(0.2)
        status = JobStatus(lab.job(client, handle.job_id).status)
    return status is JobStatus.DEAD_LETTER


def _running_attempt(lab: Lab, client: Client, job_id: str, attempt: int) -> str:
    deadline = time.monotonic() + JOB_TIMEOUT_S
    while time.monotonic() < deadline:
        row = lab.job(client, job_id)
        if row.status == JobStatus.RUNNING and row.attempts == attempt and row.worker_id:
            return row.worker_id
        time.sleep(0.02)
    raise TimeoutError(f"attempt {attempt} of job {job_id} never started")


def finished_reconnects(
    client: Client, job_ids: list[str], *, times: int, seed: int
) -> tuple[int, int]:
    """Re-read finished jobs from random sequence numbers; return (gaps, duplicates)."""
    rng = random.Random(seed)
    gaps = dups = 0
    for _ in range(times):
        job_id = rng.choice(job_ids)
        log_length = int(client.redis.llen(event_log_key(job_id)))
        if not log_length:
            gaps += 1  # a finished job's log must still be there
            continue
        start = rng.randint(0, log_length - 1)
        seqs = [event.seq for event in client.events(job_id, from_seq=start, timeout=30)]
        expected = list(range(start, log_length))
        gaps += len(set(expected) - set(seqs))
        dups += len(seqs) - len(set(seqs))
    return gaps, dups


@dataclass
class FuzzReport:
    cases: int = 0
    request_crashes: int = 0
    worker_crashes: int = 0


def fuzz_inputs(lab: Lab, client: Client, *, cases: int, seed: int) -> FuzzReport:
    """``cases`` bad requests into the producer and ``cases`` raw entries onto a queue.

    A producer crash is any exception but a clear ``LlmqError``; a worker crash is a
    worker that died, stopped draining its queue, or cannot serve a good job after.
    """
    drawn = draw_fuzz_cases(cases, seed)
    report = FuzzReport(cases=len(drawn.requests) + len(drawn.queue_payloads))
    report.request_crashes = len(find_request_crashes(drawn.requests))
    alive_before = lab.alive()
    queue = queue_name(TIER, Priority.INTERACTIVE)
    push_raw_payloads(client.redis, queue, drawn.queue_payloads)
    drained = _wait_until_empty(client, queue, timeout_s=120.0)
    report.worker_crashes = alive_before - lab.alive() + (0 if drained else 1)
    try:
        client.submit(long_request(0, 4), tier=TIER).result(timeout=JOB_TIMEOUT_S)
    except LlmqError as exc:
        log.error("a good job failed after the fuzzing: %s", exc)
        report.worker_crashes += 1
    return report


def _wait_until_empty(client: Client, queue: str, *, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while client.redis.llen(queue):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


def run_faults(
    settings: Settings,
    *,
    kills: int,
    restart_jobs: int,
    reconnects: int,
    fuzz_cases: int,
    max_tokens: int,
    seed: int,
) -> dict[str, Any]:
    """The kill, Redis restart, poison, reconnect and fuzz loops in one lab; every count."""
    with fault_lab(settings) as lab, Client(lab.settings) as client:
        started = time.monotonic()
        fuzzed = fuzz_inputs(lab, client, cases=fuzz_cases, seed=seed)
        log.info("fuzzing: %s", fuzzed)
        killed = kill_loop(lab, client, kills=kills, max_tokens=max_tokens, seed=seed)
        log.info("kill loop: %s", killed)
        # Before the Redis crash, which takes the finished jobs' replay logs with it.
        gaps, dups = finished_reconnects(client, killed.job_ids, times=reconnects, seed=seed)
        restarted = redis_restart(lab, client, jobs=restart_jobs, max_tokens=max_tokens // 2)
        log.info("Redis restart: %s", restarted)
        dead_lettered = poison_job(lab, client, max_tokens=max_tokens)
        crashed_workers = len(lab.processes) - lab.alive()
        return {
            "fuzz_cases": fuzzed.cases,
            "fuzz_request_crashes": fuzzed.request_crashes,
            "fuzz_worker_crashes": fuzzed.worker_crashes,
            "kills": killed.kills,
            "jobs_lost": killed.jobs_lost + restarted.jobs_lost,
            "duplicate_results": killed.duplicate_results,
            "stream_gaps": killed.stream_gaps + gaps,
            "stream_dups": killed.stream_dups + dups,
            "incoherent_texts": killed.incoherent_texts,
            "resumed_attempts": killed.resumed_attempts,
            "live_reconnects": killed.reconnects,
            "finished_reconnects": reconnects,
            "redis_restarts": restarted.restarts,
            "restart_acknowledged": restarted.acknowledged,
            "restart_refused": restarted.refused,
            "poison_dead_lettered": dead_lettered,
            "crashes": crashed_workers + fuzzed.request_crashes + fuzzed.worker_crashes,
            "seconds": round(time.monotonic() - started, 1),
        }
