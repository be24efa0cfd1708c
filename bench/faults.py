"""``llmq bench faults``: crash workers and Redis under load, count what was lost.

Every round runs in a lab of its own (:mod:`bench.fault_lab`).
"""

from __future__ import annotations

import contextlib
import json
import logging
import random
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy.engine import make_url

from bench.doors import fuzz_doors
from bench.fault_lab import (
    JOB_TIMEOUT_S,
    STALL_TIMEOUT_S,
    TIER,
    Lab,
    Listener,
    fault_lab,
    long_request,
)
from bench.fuzz import find_request_crashes
from bench.fuzz import fuzz_cases as draw_fuzz_cases
from bench.harness import step
from bench.queue_fuzz import push_raw_payloads
from bench.sentinel_lab import SentinelLab, failover_phase, sentinel_lab, terminal_events
from producer.client import Client
from schemas.errors import BrokerUnavailable, JobFailed, JobTimeout, LlmqError
from schemas.jobs import JobStatus
from schemas.percentiles import percentile_or_none
from schemas.queues import Priority, event_log_key, held_key, queue_name
from schemas.settings import Settings
from workers.worker import worker_pid

log = logging.getLogger(__name__)


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
    stalled_jobs: int = 0
    recovery_s: list[float] = field(default_factory=list)
    job_ids: list[str] = field(default_factory=list)


class Stalled(Exception):
    """A job did not reach the point a fault round waits for within ``STALL_TIMEOUT_S``."""


def kill_loop(lab: Lab, client: Client, *, kills: int, max_tokens: int, seed: int) -> KillReport:
    """``kills`` times: kill a worker that holds work, then start a replacement.

    Even rounds kill a job's worker after its first token (the job resumes elsewhere);
    odd rounds submit a burst and kill a worker as soon as it has taken messages off
    the queue, claimed or not yet. Every job the victim held must go on within
    seconds. The killed worker comes back warm before the next round, so there are
    always two.
    """
    rounds = KillRounds(lab, client, random.Random(seed), KillReport(), max_tokens)
    listeners: list[Listener] = []
    for index in range(kills):
        kill_round = rounds.mid_stream if index % 2 == 0 else rounds.on_arrival
        try:
            listeners += kill_round(index)
        except Stalled as exc:
            log.error("%s", exc)
            rounds.report.stalled_jobs += 1
        replacement = lab.start_worker()
        for listener in listeners:
            listener.join(JOB_TIMEOUT_S)
        lab.wait_warm(replacement)
    for listener in listeners:
        _score(lab, client, listener, rounds.report)
    return rounds.report


@dataclass
class KillRounds:
    """The two ways a kill round picks its victim."""

    lab: Lab
    client: Client
    rng: random.Random
    report: KillReport
    max_tokens: int

    def mid_stream(self, index: int) -> list[Listener]:
        """Kill a job's worker once the job has streamed its first token."""
        handle = self.client.submit(long_request(index, self.max_tokens), tier=TIER)
        listener = Listener(self.client, handle.job_id, self.rng)
        victim = _first_token_worker(self.lab, self.client, listener)
        if victim is not None:
            listener.killed_at = time.monotonic()
            self.lab.kill(victim)
            self.report.kills += 1
        return [listener]

    def on_arrival(self, index: int) -> list[Listener]:
        """Submit a burst; kill the first worker seen holding any of it."""
        handles = [
            self.client.submit(long_request(100 * index + n, self.max_tokens), tier=TIER)
            for n in range(self.lab.concurrency)
        ]
        listeners = {h.job_id: Listener(self.client, h.job_id, self.rng) for h in handles}
        victim, held = _first_holder(self.lab, self.client, set(listeners))
        killed_at = time.monotonic()
        self.lab.kill(victim)
        self.report.kills += 1
        for job_id in held:
            listeners[job_id].killed_at = killed_at
        return list(listeners.values())


def _first_holder(lab: Lab, client: Client, job_ids: set[str]) -> tuple[str, set[str]]:
    """A live worker that holds some of ``job_ids`` (unacknowledged), and which ones."""
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while time.monotonic() < deadline:
        for worker_id in _live_worker_ids(lab, client):
            held = _held_job_ids(client, worker_id) & job_ids
            if held:
                return worker_id, held
        time.sleep(0.005)
    raise Stalled(f"no worker took any of {len(job_ids)} jobs off the queue")


def _live_worker_ids(lab: Lab, client: Client) -> list[str]:
    keys = client.redis.keys(held_key("*"))
    ids = [(k.decode() if isinstance(k, bytes) else k).removeprefix(held_key("")) for k in keys]
    return [i for i in ids if worker_pid(i) in lab.processes]


def _held_job_ids(client: Client, worker_id: str) -> set[str]:
    tags = client.redis.hkeys(held_key(worker_id))
    entries = client.redis.hmget("unacked", tags) if tags else []
    return {json.loads(entry)[0]["headers"]["id"] for entry in entries if entry}


def _first_token_worker(lab: Lab, client: Client, listener: Listener) -> str | None:
    """The worker running the job once it has streamed; None if it finished first."""
    deadline = time.monotonic() + STALL_TIMEOUT_S
    while time.monotonic() < deadline:
        row = lab.job(client, listener.job_id)
        if JobStatus(row.status).is_final:
            return None
        if listener.streamed and row.status == JobStatus.RUNNING and row.worker_id:
            return row.worker_id
        time.sleep(0.02)
    raise Stalled(f"job {listener.job_id} never started streaming")


def _score(lab: Lab, client: Client, listener: Listener, report: KillReport) -> None:
    report.jobs += 1
    report.job_ids.append(listener.job_id)
    report.reconnects += listener.reconnects
    report.stream_gaps += listener.gaps
    report.stream_dups += listener.dups
    report.resumed_attempts += listener.attempts_seen - 1
    recovery = listener.recovery_s()
    if recovery is not None:
        report.recovery_s.append(recovery)
    elif listener.killed_at is not None and listener.final is None:
        report.stalled_jobs += 1
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
    return terminal_events(client.redis.lrange(event_log_key(job_id), 0, -1))


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
    assert lab.redis_server is not None, "a sentinel lab is failed over, not restarted"
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
    # Every worker that met the job is dead: a replacement's reaper must find it. A
    # replacement that took a later attempt was killed with it: only the others warm.
    for process in replacements:
        if process.pid in lab.processes:
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
    raise Stalled(f"attempt {attempt} of job {job_id} never started")


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
    worker that died, stopped draining its queue, or takes no good job after: a burst
    that fills every slot must reach every worker (a wedged one leaves it to others).
    """
    drawn = draw_fuzz_cases(cases, seed)
    report = FuzzReport(cases=len(drawn.requests) + len(drawn.queue_payloads))
    report.request_crashes = len(find_request_crashes(drawn.requests))
    alive_before = lab.alive()
    queue = queue_name(TIER, Priority.INTERACTIVE)
    push_raw_payloads(client.redis, queue, drawn.queue_payloads)
    drained = _wait_until_empty(client, queue, timeout_s=120.0)
    report.worker_crashes = alive_before - lab.alive() + (0 if drained else 1)
    report.worker_crashes += _workers_not_serving(lab, client)
    return report


def _workers_not_serving(lab: Lab, client: Client) -> int:
    """How many live workers take none of a burst of good jobs that fills every slot."""
    burst = [
        client.submit(long_request(n, 24), tier=TIER) for n in range(lab.alive() * lab.concurrency)
    ]
    served: set[str] = set()
    for handle in burst:
        try:
            served.add(handle.result(timeout=JOB_TIMEOUT_S).worker_id or "")
        except LlmqError as exc:
            log.error("a good job failed after the fuzzing: %s", exc)
    idle = {pid for pid, process in lab.processes.items() if process.poll() is None}
    idle -= {worker_pid(worker_id) for worker_id in served if worker_id}
    for pid in idle:
        log.error("worker %d took no work after the fuzzing", pid)
    return len(idle)


def _wait_until_empty(client: Client, queue: str, *, timeout_s: float) -> bool:
    deadline = time.monotonic() + timeout_s
    while client.redis.llen(queue):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.2)
    return True


@dataclass(frozen=True)
class FaultPlan:
    """How much of each fault ``llmq bench faults`` injects."""

    kills: int = 20
    restart_jobs: int = 20
    failover_jobs: int = 12
    reconnects: int = 100
    fuzz_cases: int = 1000
    max_tokens: int = 96
    seed: int = 7
    logs_dir: Path | None = None


def run_faults(settings: Settings, plan: FaultPlan) -> dict[str, Any]:
    """Every round (doors, kills, Redis restart, poison, failover); every count."""
    started = time.monotonic()
    with step(f"fuzzing the doors ({plan.fuzz_cases} bad inputs of each kind)"):
        result = fuzz_doors(settings, cases=plan.fuzz_cases, seed=plan.seed)
    result |= _worker_rounds(settings, plan)
    result |= _failover_round(settings, plan)
    result["crashes"] += result["submit_crashes"]
    result["seconds"] = round(time.monotonic() - started, 1)
    return result


def _worker_rounds(settings: Settings, plan: FaultPlan) -> dict[str, Any]:
    """The kill, Redis restart, poison, reconnect and queue-fuzz rounds in one lab."""
    with contextlib.ExitStack() as stack:
        with step("starting the fault lab (Redis, workers)"):
            lab = stack.enter_context(fault_lab(settings, logs_dir=plan.logs_dir))
        client = stack.enter_context(Client(lab.settings))
        with step(f"fuzzing the queue's inputs ({plan.fuzz_cases} of each kind)"):
            fuzzed = fuzz_inputs(lab, client, cases=plan.fuzz_cases, seed=plan.seed)
        log.info("fuzzing: %s", fuzzed)
        with step(f"killing {plan.kills} workers holding work"):
            killed = kill_loop(
                lab, client, kills=plan.kills, max_tokens=plan.max_tokens, seed=plan.seed
            )
        log.info("kill loop: %s", killed)
        # Before the Redis crash, which takes the finished jobs' replay logs with it.
        with step(f"re-reading finished streams {plan.reconnects} times"):
            gaps, dups = finished_reconnects(
                client, killed.job_ids, times=plan.reconnects, seed=plan.seed
            )
        with step(f"restarting Redis around {plan.restart_jobs} jobs"):
            restarted = redis_restart(
                lab, client, jobs=plan.restart_jobs, max_tokens=plan.max_tokens // 2
            )
        log.info("Redis restart: %s", restarted)
        try:
            with step("a poison job"):
                dead_lettered = poison_job(lab, client, max_tokens=plan.max_tokens)
        except Stalled as exc:
            log.error("poison job: %s", exc)
            killed.stalled_jobs += 1
            dead_lettered = False
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
            "stalled_jobs": killed.stalled_jobs,
            "recovery_samples": len(killed.recovery_s),
            "recovery_s_p50": percentile_or_none(killed.recovery_s, 50, ndigits=2),
            "recovery_s_max": round(max(killed.recovery_s), 2) if killed.recovery_s else None,
            "live_reconnects": killed.reconnects,
            "finished_reconnects": plan.reconnects,
            "redis_restarts": restarted.restarts,
            "restart_acknowledged": restarted.acknowledged,
            "restart_refused": restarted.refused,
            "poison_dead_lettered": dead_lettered,
            "crashes": crashed_workers + fuzzed.request_crashes + fuzzed.worker_crashes,
            "database": make_url(lab.settings.database_url).get_backend_name(),
        }


def _failover_round(settings: Settings, plan: FaultPlan) -> dict[str, Any]:
    """Kill the Redis master of a Sentinel group under load; one worker follows it."""
    if plan.failover_jobs <= 0:
        return {}
    with contextlib.ExitStack() as stack:
        with step("starting a Sentinel group and its lab"):
            sentinels = stack.enter_context(sentinel_lab())
            lab = stack.enter_context(
                fault_lab(settings, workers=1, sentinels=sentinels, logs_dir=plan.logs_dir)
            )
        client = stack.enter_context(Client(lab.settings))
        with step(f"failing over the Redis master under {plan.failover_jobs} jobs"):
            report = failover_phase(
                FailoverView(lab.settings, sentinels),
                client,
                jobs=plan.failover_jobs,
                max_tokens=plan.max_tokens // 2,
            )
    return report.figures()


@dataclass
class FailoverView:
    """A fault lab on a Sentinel group, as :func:`failover_phase` wants it."""

    settings: Settings
    sentinels: SentinelLab
