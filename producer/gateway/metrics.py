"""The gateway's Prometheus series, on a registry of its own."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Histogram


class GatewayMetrics:
    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter(
            "llmq_gateway_requests",
            "Chat completion requests by model and HTTP status",
            ["model", "status"],
            registry=self.registry,
        )
        self.ttft = Histogram(
            "llmq_gateway_ttft_seconds",
            "Time from request to first streamed token",
            ["model"],
            registry=self.registry,
            buckets=(0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30),
        )
