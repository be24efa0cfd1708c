"""Queue state as Prometheus series: depth and oldest-message age of every tier queue."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

import redis
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from schemas.queues import all_queues
from schemas.tables import Job, as_utc


class QueueCollector(Collector):
    """Reads Redis (and the oldest job's row) at scrape time."""

    def __init__(self, client: redis.Redis, sessions: sessionmaker[Session]) -> None:
        self._redis = client
        self._sessions = sessions

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("llmq_queue_depth", "Messages waiting", labels=["queue"])
        age = GaugeMetricFamily(
            "llmq_queue_oldest_age_seconds", "Age of the oldest waiting job", labels=["queue"]
        )
        for queue in all_queues():
            length = int(self._redis.llen(queue))
            depth.add_metric([queue], length)
            age.add_metric([queue], self._oldest_age(queue) if length else 0.0)
        yield depth
        yield age

    def _oldest_age(self, queue: str) -> float:
        # Producers LPUSH and workers BRPOP, so the oldest message is at the right end;
        # its task id is the job id, whose row knows when it was submitted.
        raw = self._redis.lindex(queue, -1)
        try:
            job_id = json.loads(raw)["headers"]["id"] if raw else None
        except (ValueError, KeyError, TypeError):
            return 0.0
        with self._sessions() as session:
            created = session.scalar(select(Job.created_at).where(Job.id == job_id))
        if created is None:
            return 0.0
        return max(0.0, (datetime.now(UTC) - as_utc(created)).total_seconds())
