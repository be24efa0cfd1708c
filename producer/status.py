"""What ``llmq status`` shows: queue depths per tier and priority, and the workers."""

from __future__ import annotations

import contextlib
import json
from dataclasses import dataclass
from datetime import UTC, datetime

import redis
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from schemas.boundary import broker_boundary
from schemas.queues import Priority, Tier, parse_queue_name, queue_name
from schemas.registry import WorkerEntry, read_entries
from schemas.tables import Job, as_utc


@dataclass(frozen=True)
class QueueDepth:
    tier: Tier
    priority: Priority
    depth: int


def queue_depths(client: redis.Redis) -> list[QueueDepth]:
    """Messages waiting in every ``llm.<tier>.<priority>`` queue."""
    # Variants' queues (llm.small@bf16.*) exist only once used: found by name.
    variants = set()
    for key in client.scan_iter(match="llm.*@*.*", count=1000):
        with contextlib.suppress(ValueError):
            variants.add(parse_queue_name(key.decode() if isinstance(key, bytes) else key)[0])
    pipe = client.pipeline(transaction=False)
    tiers = [*Tier, *sorted(variants), Tier.EMBED]
    pairs = [(tier, priority) for tier in tiers for priority in Priority]
    for tier, priority in pairs:
        pipe.llen(queue_name(tier, priority))
    depths = pipe.execute()
    return [QueueDepth(t, p, int(d)) for (t, p), d in zip(pairs, depths, strict=True)]


def oldest_waiting_age(client: redis.Redis, sessions: sessionmaker[Session], queue: str) -> float:
    """Seconds since the oldest message waiting in ``queue`` was submitted; 0 if none."""
    # Producers LPUSH and workers BRPOP, so the oldest message is at the right end;
    # its task id is the job id, whose row knows when it was submitted.
    raw = client.lindex(queue, -1)
    try:
        job_id = json.loads(raw)["headers"]["id"] if raw else None
    except (ValueError, KeyError, TypeError):
        return 0.0
    if not job_id:
        return 0.0
    with sessions() as session:
        created = session.scalar(select(Job.created_at).where(Job.id == str(job_id)))
    if created is None:
        return 0.0
    return max(0.0, (datetime.now(UTC) - as_utc(created)).total_seconds())


def live_workers(client: redis.Redis) -> list[WorkerEntry]:
    """Every worker that sent a heartbeat recently, sorted by tier and id."""
    return sorted(read_entries(client), key=lambda w: (w.tier.value, w.worker_id))


def render_status(client: redis.Redis) -> str:
    """A person-readable table of queues and workers; raises ``BrokerUnavailable``."""
    with broker_boundary("read the status from Redis"):
        depths = queue_depths(client)
        workers = live_workers(client)
    lines = ["QUEUE                     DEPTH"]
    served = {w.tier for w in workers}
    lines += [
        f"{queue_name(d.tier, d.priority):<25} {d.depth:>5}{_unread(d, served)}" for d in depths
    ]
    lines.append("")
    if not workers:
        lines.append("no workers running (start one with: llmq worker --tier small)")
        return "\n".join(lines)
    lines.append(
        "WORKER                              TIER    ENGINE  IN-FLIGHT  FREE/SLOTS  "
        "PREFIX HITS  BATCH WHILE PEOPLE WAIT"
    )
    for worker in workers:
        engine = "warm" if worker.warm else "warming"
        free = f"{worker.free_slots}/{worker.concurrency}"
        lines.append(
            f"{worker.worker_id:<35} {worker.tier.value:<7} {engine:<7} "
            f"{worker.in_flight:>9}  {free:>10}  {_hits(worker):<11}  {_batch_share(worker)}"
        )
    return "\n".join(lines)


def _unread(depth: QueueDepth, served: set[Tier]) -> str:
    if depth.depth and depth.tier not in served:
        return "  ! no worker reads this queue"
    return ""


def _batch_share(worker: WorkerEntry) -> str:
    """The batch slots the worker leaves to batch work while interactive work is about."""
    if worker.batch_under_interactive is None:
        return "-"
    if worker.batch_under_interactive == 0:
        return "paused"
    share = f"{worker.batch_under_interactive} slots"
    if worker.interactive_ttft_slo_ms is not None:
        share += (
            f" (SLO {worker.interactive_ttft_slo_ms:g} ms, {worker.batch_share_cuts or 0} cuts)"
        )
    return share


def _hits(worker: WorkerEntry) -> str:
    if not worker.system_prompt_requests:
        return "-"
    return f"{worker.system_prompt_hits}/{worker.system_prompt_requests}"
