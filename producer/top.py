"""``llmq top``: queues, workers, latency, routing and errors, redrawn every second.

It reads what ``llmq status`` and the gateway's queue series read (Redis queues and
the worker registry) plus the job rows of the last minute, so it needs no metrics
server. ``--once`` prints one frame and exits (for scripts, tests and a quick look).
"""

from __future__ import annotations

import argparse
import time
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import redis
from rich import box
from rich.console import Console, Group, RenderableType
from rich.table import Table
from rich.text import Text
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from producer.status import live_workers, oldest_waiting_age, queue_depths
from schemas.boundary import broker_boundary
from schemas.db_clock import db_now
from schemas.jobs import JobStatus
from schemas.percentiles import percentile
from schemas.queues import (
    DROPPED_MESSAGES_KEY,
    ROUTING_COUNTS_KEY,
    Priority,
    Tier,
    queue_name,
)
from schemas.registry import WorkerEntry
from schemas.tables import Job

# Not a setting: the span of llmq top's rates, a display choice.
WINDOW_S = 60.0
ERROR_STATUSES = (JobStatus.FAILED, JobStatus.DEAD_LETTER, JobStatus.EXPIRED)


@dataclass(frozen=True)
class QueueRow:
    tier: Tier
    priority: Priority
    depth: int
    oldest_age_s: float


@dataclass(frozen=True)
class LatencyRow:
    """Finished jobs of one tier and priority in the window, with TTFT and queue-wait."""

    tier: Tier
    priority: Priority
    jobs: int
    ttft_ms: tuple[float, float] | None
    """(p50, p95), None without samples."""
    queue_wait_ms: tuple[float, float] | None


@dataclass(frozen=True)
class Snapshot:
    """One frame of ``llmq top``."""

    queues: list[QueueRow]
    workers: list[WorkerEntry]
    latency: list[LatencyRow]
    routing: dict[str, int]
    """Auto-routing decisions since the counters began, by ``<tier>:<kind>``."""
    errors: dict[str, int] = field(default_factory=dict)
    """Jobs that ended badly in the window, by status."""
    dropped_messages: int = 0
    window_s: float = WINDOW_S


def read_snapshot(
    client: redis.Redis, sessions: sessionmaker[Session], *, window_s: float = WINDOW_S
) -> Snapshot:
    """Read one frame; raises ``BrokerUnavailable`` if Redis cannot be read."""
    with broker_boundary("read queues and workers from Redis"):
        depths = queue_depths(client)
        queues = [
            QueueRow(
                d.tier,
                d.priority,
                d.depth,
                oldest_waiting_age(client, sessions, queue_name(d.tier, d.priority))
                if d.depth
                else 0.0,
            )
            for d in depths
        ]
        workers = live_workers(client)
        routing = {_text(k): int(v) for k, v in client.hgetall(ROUTING_COUNTS_KEY).items()}
        dropped = int(client.get(DROPPED_MESSAGES_KEY) or 0)
    latency, errors = _recent_jobs(sessions, window_s)
    return Snapshot(queues, workers, latency, routing, errors, dropped, window_s)


def _recent_jobs(
    sessions: sessionmaker[Session], window_s: float
) -> tuple[list[LatencyRow], dict[str, int]]:
    query = select(Job.tier, Job.priority, Job.status, Job.ttft_ms, Job.queue_wait_ms).where(
        Job.finished_at >= db_now(-window_s)
    )
    ttft: dict[tuple[str, str], list[float]] = defaultdict(list)
    wait: dict[tuple[str, str], list[float]] = defaultdict(list)
    done: dict[tuple[str, str], int] = defaultdict(int)
    errors: dict[str, int] = defaultdict(int)
    with sessions() as session:
        for row in session.execute(query):
            if row.status != JobStatus.DONE.value:
                if row.status in ERROR_STATUSES:
                    errors[row.status] += 1
                continue
            key = (row.tier, row.priority)
            done[key] += 1
            if row.ttft_ms is not None:
                ttft[key].append(row.ttft_ms)
            if row.queue_wait_ms is not None:
                wait[key].append(row.queue_wait_ms)
    rows = [
        LatencyRow(
            Tier(tier), Priority(priority), count, _p50_p95(ttft[tier, priority]),
            _p50_p95(wait[tier, priority]),
        )
        for (tier, priority), count in sorted(done.items())
    ]  # fmt: skip
    return rows, dict(errors)


def _p50_p95(samples: Sequence[float]) -> tuple[float, float] | None:
    if not samples:
        return None
    return percentile(samples, 50), percentile(samples, 95)


def render(snapshot: Snapshot) -> RenderableType:
    """The frame as rich tables: queues, workers, latency, routing and errors."""
    queues = Table(
        title="queues (depth, oldest waiting)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    queues.add_column("tier")
    for priority in Priority:
        queues.add_column(priority.value, justify="right")
    served = {w.tier for w in snapshot.workers}
    for tier in Tier:
        cells = [_queue_cell(q, tier in served) for q in snapshot.queues if q.tier == tier]
        queues.add_row(tier.value, *cells)

    workers = Table(title="workers", title_justify="left", box=box.SIMPLE_HEAD, show_edge=False)
    for column in ("worker", "tier", "engine", "in-flight", "free/slots", "prefix hits"):
        workers.add_column(column, justify="right" if column not in ("worker", "tier") else "left")
    for w in snapshot.workers:
        engine = Text("warm", style="green") if w.warm else Text(w.phase or "warming", "yellow")
        workers.add_row(
            w.worker_id,
            w.tier.value,
            engine,
            str(w.in_flight),
            f"{w.free_slots}/{w.concurrency}",
            _hits(w),
        )
    if not snapshot.workers:
        workers.add_row("none running", "", "", "", "", "", style="red")

    minute = f"last {snapshot.window_s:.0f} s"
    latency = Table(
        title=f"latency ({minute}, finished jobs)",
        title_justify="left",
        box=box.SIMPLE_HEAD,
        show_edge=False,
    )
    for column in ("tier", "priority", "jobs", "TTFT p50", "TTFT p95", "wait p50", "wait p95"):
        latency.add_column(column, justify="left" if column in ("tier", "priority") else "right")
    for row in snapshot.latency:
        latency.add_row(
            row.tier.value,
            row.priority.value,
            str(row.jobs),
            *_pair(row.ttft_ms),
            *_pair(row.queue_wait_ms),
        )
    if not snapshot.latency:
        latency.caption = "no job finished in the window"

    return Group(
        Text(f"llmq top  {time.strftime('%H:%M:%S')}  (Ctrl-C quits)", style="bold"),
        queues,
        workers,
        latency,
        Text.assemble(("routing ", "bold"), _routing(snapshot.routing)),
        Text.assemble(("errors  ", "bold"), _errors(snapshot)),
    )


def _queue_cell(queue: QueueRow, read: bool) -> Text:
    """Depth and oldest wait; a queue with work that no worker reads says so, in red."""
    if not queue.depth:
        return Text("0", style="dim")
    if not read:
        return Text(f"{queue.depth}  {_age(queue.oldest_age_s)}  no reader", style="bold red")
    return Text(f"{queue.depth}  {_age(queue.oldest_age_s)}", style="bold yellow")


def _routing(counts: dict[str, int]) -> Text:
    if not counts:
        return Text("no auto-routed requests yet", style="dim")
    total = sum(counts.values())
    by_tier: dict[str, int] = defaultdict(int)
    by_kind: dict[str, int] = defaultdict(int)
    for key, count in counts.items():
        tier, _, kind = key.partition(":")
        by_tier[tier] += count
        by_kind[kind] += count
    tiers = "  ".join(f"{t} {100 * by_tier[t] / total:.0f}%" for t in sorted(by_tier))
    kinds = ", ".join(f"{k} {n}" for k, n in sorted(by_kind.items()))
    return Text(f"{tiers}  ({total} auto: {kinds})")


def _errors(snapshot: Snapshot) -> Text:
    parts = [f"{status} {n}" for status, n in sorted(snapshot.errors.items())]
    if snapshot.dropped_messages:
        parts.append(f"malformed messages dropped (all time) {snapshot.dropped_messages}")
    if not parts:
        return Text(f"none in the last {snapshot.window_s:.0f} s", style="green")
    return Text(", ".join(parts), style="red")


def _pair(values: tuple[float, float] | None) -> tuple[str, str]:
    if values is None:
        return "-", "-"
    return _ms(values[0]), _ms(values[1])


def _ms(value: float) -> str:
    return f"{value:.0f} ms" if value < 10_000 else f"{value / 1000:.1f} s"


def _age(seconds: float) -> str:
    if seconds <= 0:
        return "-"
    return f"{seconds:.1f} s" if seconds < 120 else f"{seconds / 60:.0f} min"


def _hits(worker: WorkerEntry) -> str:
    if not worker.system_prompt_requests:
        return "-"
    return f"{worker.system_prompt_hits}/{worker.system_prompt_requests}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def run_top(
    client: redis.Redis,
    sessions: sessionmaker[Session],
    *,
    once: bool = False,
    interval_s: float = 1.0,
    console: Console | None = None,
) -> int:
    """Print one frame (``once``) or redraw every ``interval_s`` until Ctrl-C."""
    from rich.live import Live

    console = console or Console()
    if once:
        console.print(render(read_snapshot(client, sessions)))
        return 0
    # screen=True uses the alternate screen: the shell's scrollback is left as it was.
    with Live(console=console, screen=True, auto_refresh=False) as live:
        try:
            while True:
                live.update(render(read_snapshot(client, sessions)), refresh=True)
                time.sleep(interval_s)
        except KeyboardInterrupt:
            return 0


def register(commands: Any) -> None:
    """Add ``llmq top [--once] [--interval S]``."""
    top = commands.add_parser(
        "top", help="live view of queues, workers, latency, routing and errors (Ctrl-C quits)"
    )
    top.add_argument("--once", action="store_true", help="print one frame and exit")
    top.add_argument(
        "--interval", type=float, default=1.0, help="seconds between frames (default 1)"
    )
    top.set_defaults(handler=_top)


def _top(args: argparse.Namespace) -> int:
    from schemas.broker import redis_client
    from schemas.db import make_engine, make_sessions
    from schemas.settings import Settings

    settings = Settings.from_env()
    db = make_engine(settings.database_url)
    try:
        return run_top(
            redis_client(settings.broker_url),
            make_sessions(db),
            once=args.once,
            interval_s=args.interval,
        )
    finally:
        db.dispose()
