"""Cluster state as Prometheus series (the gateway renders them off its event loop,
:mod:`producer.gateway.scrape`): every tier queue's depth and
oldest-message age, Redis reachable or not, workers by tier and warmth, auto-routing
decisions, and dead-lettered jobs.

deploy/grafana/llmq.json and deploy/prometheus/alerts.yml query these series (and the
workers' own); tests/unit/test_observability_files.py checks every name they use.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from typing import Protocol

import redis
from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy import func, select
from sqlalchemy.orm import Session, sessionmaker

from producer.status import QueueDepth, live_workers, oldest_waiting_age
from schemas.errors import LlmqError
from schemas.jobs import JobStatus
from schemas.queues import ROUTING_COUNTS_KEY, Tier, queue_name
from schemas.tables import Job

log = logging.getLogger(__name__)


class ClusterSource(Protocol):
    """The connections the collector reads through (a :class:`producer.client.Client`
    has them; the gateway opens its own for each render)."""

    @property
    def redis(self) -> redis.Redis: ...

    @property
    def sessions(self) -> sessionmaker[Session]: ...

    def queue_depths(self) -> list[QueueDepth]: ...


class QueueCollector(Collector):
    """Reads Redis (and a few job rows) when collected. Redis unreachable is a series
    (``llmq_redis_up`` 0); a database error is raised (SQLAlchemy's), so the caller
    keeps the series it last read rather than publishing a partial picture."""

    def __init__(self, client: ClusterSource) -> None:
        self._client = client

    def collect(self) -> Iterator[Metric]:
        up = GaugeMetricFamily("llmq_redis_up", "1 if the gateway could read Redis, else 0")
        try:
            families = self._from_redis()
        except (redis.RedisError, LlmqError) as exc:
            log.warning("metrics: Redis unreadable (%s)", exc.__class__.__name__)
            up.add_metric([], 0)
            yield up
        else:
            up.add_metric([], 1)
            yield up
            yield from families
        yield self._dead_letter_jobs()

    def _from_redis(self) -> list[Metric]:
        labels = ["queue", "tier", "priority"]
        depth = GaugeMetricFamily("llmq_queue_depth", "Messages waiting", labels=labels)
        age = GaugeMetricFamily(
            "llmq_queue_oldest_age_seconds", "Age of the oldest waiting job", labels=labels
        )
        for waiting in self._client.queue_depths():
            queue = queue_name(waiting.tier, waiting.priority)
            values = [queue, waiting.tier.value, waiting.priority.value]
            depth.add_metric(values, waiting.depth)
            age.add_metric(values, self._oldest_age(queue) if waiting.depth else 0.0)
        workers = GaugeMetricFamily(
            "llmq_workers", "Live workers by tier and engine state", labels=["tier", "state"]
        )
        live = live_workers(self._client.redis)
        for tier in Tier:
            warm = sum(1 for w in live if w.tier == tier and w.warm)
            warming = sum(1 for w in live if w.tier == tier and not w.warm)
            workers.add_metric([tier.value, "warm"], warm)
            workers.add_metric([tier.value, "warming"], warming)
        routing = CounterMetricFamily(
            "llmq_routing_decisions",
            "Auto-routing decisions by chosen tier and how (classified, escalated, load, default)",
            labels=["tier", "kind"],
        )
        for key, count in self._client.redis.hgetall(ROUTING_COUNTS_KEY).items():
            tier_name, _, kind = (key.decode() if isinstance(key, bytes) else key).partition(":")
            routing.add_metric([tier_name, kind], int(count))
        return [depth, age, workers, routing]

    def _oldest_age(self, queue: str) -> float:
        return oldest_waiting_age(self._client.redis, self._client.sessions, queue)

    def _dead_letter_jobs(self) -> GaugeMetricFamily:
        # Dead letters are rare and (status, created_at) is indexed: a cheap count.
        with self._client.sessions() as session:
            count = session.scalar(
                select(func.count())
                .select_from(Job)
                .where(Job.status == JobStatus.DEAD_LETTER.value)
            )
        family = GaugeMetricFamily(
            "llmq_dead_letter_jobs", "Job rows in dead_letter (workers died on every attempt)"
        )
        family.add_metric([], int(count or 0))
        return family
