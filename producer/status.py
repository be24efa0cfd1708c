"""What ``llmq status`` shows: queue depths per tier and priority, and the workers."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import redis

from schemas.boundary import broker_boundary
from schemas.queues import WORKER_KEY_PREFIX, Priority, Tier, queue_name


@dataclass(frozen=True)
class QueueDepth:
    tier: Tier
    priority: Priority
    depth: int


def queue_depths(client: redis.Redis) -> list[QueueDepth]:
    """Messages waiting in every ``llm.<tier>.<priority>`` queue."""
    pipe = client.pipeline(transaction=False)
    pairs = [(tier, priority) for tier in Tier for priority in Priority]
    for tier, priority in pairs:
        pipe.llen(queue_name(tier, priority))
    depths = pipe.execute()
    return [QueueDepth(t, p, int(d)) for (t, p), d in zip(pairs, depths, strict=True)]


def live_workers(client: redis.Redis) -> list[dict[str, Any]]:
    """Every worker that sent a heartbeat recently, sorted by tier and id."""
    workers = []
    for key in client.scan_iter(match=f"{WORKER_KEY_PREFIX}*"):
        raw = client.hgetall(key)
        if raw:
            workers.append({_text(k): json.loads(v) for k, v in raw.items()})
    return sorted(workers, key=lambda w: (str(w.get("tier")), str(w.get("worker_id"))))


def render_status(client: redis.Redis) -> str:
    """A person-readable table of queues and workers; raises ``BrokerUnavailable``."""
    with broker_boundary("read the status from Redis"):
        depths = queue_depths(client)
        workers = live_workers(client)
    lines = ["QUEUE                     DEPTH"]
    lines += [f"{queue_name(d.tier, d.priority):<25} {d.depth:>5}" for d in depths]
    lines.append("")
    if not workers:
        lines.append("no workers running (start one with: llmq worker --tier small)")
        return "\n".join(lines)
    lines.append(
        "WORKER                              TIER    ENGINE  IN-FLIGHT  FREE/SLOTS  PREFIX HITS"
    )
    for worker in workers:
        engine = "warm" if worker.get("warm") else "warming"
        lines.append(
            f"{worker.get('worker_id', '?'):<35} {worker.get('tier', '?'):<7} {engine:<7} "
            f"{worker.get('in_flight', 0):>9}  {_free(worker):>10}  "
            f"{_hits(worker)}"
        )
    return "\n".join(lines)


def _free(worker: dict[str, Any]) -> str:
    slots = int(worker.get("concurrency") or 0)
    return f"{max(0, slots - int(worker.get('in_flight') or 0))}/{slots}"


def _hits(worker: dict[str, Any]) -> str:
    requests = worker.get("system_prompt_requests") or 0
    if not requests:
        return "-"
    return f"{worker.get('system_prompt_hits', 0)}/{requests}"


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value
