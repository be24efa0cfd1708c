"""Queue state as Prometheus series: depth and oldest-message age of every tier queue."""

from __future__ import annotations

import json
from collections.abc import Iterator
from datetime import UTC, datetime

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from producer.client import Client
from schemas.errors import JobNotFound
from schemas.queues import queue_name
from schemas.tables import as_utc


class QueueCollector(Collector):
    """Reads Redis (and the oldest job's row) at scrape time."""

    def __init__(self, client: Client) -> None:
        self._client = client

    def collect(self) -> Iterator[GaugeMetricFamily]:
        depth = GaugeMetricFamily("llmq_queue_depth", "Messages waiting", labels=["queue"])
        age = GaugeMetricFamily(
            "llmq_queue_oldest_age_seconds", "Age of the oldest waiting job", labels=["queue"]
        )
        for waiting in self._client.queue_depths():
            queue = queue_name(waiting.tier, waiting.priority)
            depth.add_metric([queue], waiting.depth)
            age.add_metric([queue], self._oldest_age(queue) if waiting.depth else 0.0)
        yield depth
        yield age

    def _oldest_age(self, queue: str) -> float:
        # Producers LPUSH and workers BRPOP, so the oldest message is at the right end;
        # its task id is the job id, whose row knows when it was submitted.
        raw = self._client.redis.lindex(queue, -1)
        try:
            job_id = json.loads(raw)["headers"]["id"] if raw else None
            created = self._client.job(str(job_id)).created_at if job_id else None
        except (ValueError, KeyError, TypeError, JobNotFound):
            return 0.0
        if created is None:
            return 0.0
        return max(0.0, (datetime.now(UTC) - as_utc(created)).total_seconds())
