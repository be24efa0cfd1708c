"""Queue state as Prometheus series: depth and oldest-message age of every tier queue."""

from __future__ import annotations

from collections.abc import Iterator

from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from producer.client import Client
from producer.status import oldest_waiting_age
from schemas.queues import queue_name


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
        return oldest_waiting_age(self._client.redis, self._client.sessions, queue)
