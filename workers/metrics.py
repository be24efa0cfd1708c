"""A worker's Prometheus series, served on its own port for scrapers and autoscalers."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

LATENCY_BUCKETS = (0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60)
TPOT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1)


class WorkerMetrics:
    """In-flight and free slots, per-job latencies by tier and priority, outcomes, cache hits."""

    def __init__(self, *, tier: str, slots: int, in_flight: Callable[[], int]) -> None:
        self.registry = CollectorRegistry()
        labels = ["tier", "priority"]
        self.tier = tier
        self.in_flight = Gauge(
            "llmq_worker_in_flight", "Requests inside the engine", ["tier"], registry=self.registry
        )
        self.in_flight.labels(tier).set_function(in_flight)
        self.free_slots = Gauge(
            "llmq_worker_free_slots",
            "Engine slots free for new jobs",
            ["tier"],
            registry=self.registry,
        )
        self.free_slots.labels(tier).set_function(lambda: max(0, slots - in_flight()))
        self.ttft = Histogram(
            "llmq_worker_ttft_seconds",
            "Submit to first token",
            labels,
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )
        self.tpot = Histogram(
            "llmq_worker_tpot_seconds",
            "Time per output token after the first",
            labels,
            registry=self.registry,
            buckets=TPOT_BUCKETS,
        )
        self.queue_wait = Histogram(
            "llmq_worker_queue_wait_seconds",
            "Submit to start of work",
            labels,
            registry=self.registry,
            buckets=LATENCY_BUCKETS,
        )
        self.jobs = Counter(
            "llmq_worker_jobs",
            "Finished jobs by outcome",
            [*labels, "status"],
            registry=self.registry,
        )

    def observe_done(
        self,
        priority: str,
        *,
        queue_wait_ms: float,
        ttft_ms: float | None,
        total_ms: float,
        completion_tokens: int,
    ) -> None:
        labels = (self.tier, priority)
        self.queue_wait.labels(*labels).observe(queue_wait_ms / 1000)
        if ttft_ms is not None:
            self.ttft.labels(*labels).observe(ttft_ms / 1000)
            if completion_tokens > 1:
                tpot = (total_ms - ttft_ms) / 1000 / (completion_tokens - 1)
                self.tpot.labels(*labels).observe(max(tpot, 0.0))
        self.jobs.labels(*labels, "done").inc()

    def observe_failed(self, priority: str) -> None:
        self.jobs.labels(self.tier, priority, "failed").inc()

    def serve(self, port: int, address: str = "0.0.0.0") -> Any:
        """Start the /metrics HTTP server in a daemon thread."""
        return start_http_server(port, addr=address, registry=self.registry)
