"""The cluster half of ``/metrics``, rendered off the event loop and served from memory.

Reading the cluster (a ``SCAN`` for variant queues, a depth per queue, the worker
registry, job rows) is synchronous Redis and SQL: run on the loop, every stream would
stall for as long as a scrape takes, and anyone repeating ``GET /metrics`` could keep
it stalled. So a thread of its own renders those series once at start and then every
``refresh_s`` seconds while someone scrapes, over connections of its own that it keeps
from one render to the next (a render that fails drops them: the next connects
afresh), and a scrape only copies the last good rendering. A render that fails (the
database is down) keeps the previous one; ``llmq_metrics_cluster_age_seconds`` says
how old what is served is.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass

import redis
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.registry import Collector
from sqlalchemy.orm import Session, sessionmaker

from producer.gateway.queue_metrics import QueueCollector
from producer.status import QueueDepth, queue_depths
from schemas.broker import redis_client
from schemas.db import engine_of, make_engine, make_sessions
from schemas.settings import Settings

log = logging.getLogger(__name__)

# Not a setting: it bounds one Redis call of a read that runs off the request path;
# LLMQ_METRICS_REFRESH_S is the operator's knob.
SOCKET_TIMEOUT_S = 5.0
"""A render waits at most this long on one Redis call (it never holds up a request)."""

IDLE_AFTER_REFRESHES = 20
"""With no scrape for this many periods (and at least a minute), rendering pauses until
the next scrape: an unscraped gateway sends no ``SCAN`` to Redis."""


@dataclass
class _Connections:
    """What :class:`QueueCollector` reads through, kept across renders."""

    redis: redis.Redis
    sessions: sessionmaker[Session]

    @classmethod
    def open(cls, settings: Settings) -> _Connections:
        client = redis_client(
            settings.broker_url,
            socket_timeout=SOCKET_TIMEOUT_S,
            socket_connect_timeout=SOCKET_TIMEOUT_S,
            max_connections=2,
        )
        return cls(client, make_sessions(make_engine(settings.database_url)))

    def close(self) -> None:
        self.redis.close()
        engine_of(self.sessions).dispose()

    def queue_depths(self) -> list[QueueDepth]:
        return queue_depths(self.redis)


Render = Callable[[], bytes]


class ClusterScrape:
    """The last good rendering of the cluster's series, refreshed in a daemon thread."""

    def __init__(
        self,
        settings: Settings,
        *,
        refresh_s: float,
        render: Render | None = None,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.settings = settings
        self.refresh_s = refresh_s
        self._render = render or self._render_cluster
        self._clock = clock
        self._body = b""
        self._rendered_at: float | None = None
        self._last_read: float | None = None
        """When the series were last scraped; None before the first scrape."""
        self._connections: _Connections | None = None
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Render now, and then every ``refresh_s`` seconds while scraped, in a thread
        of its own."""
        self._thread = threading.Thread(target=self._run, name="llmq-metrics", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        """Stop rendering (within the render under way, if any)."""
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(timeout=SOCKET_TIMEOUT_S * 2)

    def read(self) -> bytes:
        """The last good rendering (empty before the first); never blocks."""
        now = self._clock()
        self._last_read = now
        if self._rendered_at is None or now - self._rendered_at >= self.refresh_s:
            self._wake.set()  # it may have paused, idle: render for the next scrape
        return self._body

    def age_s(self) -> float | None:
        """Seconds since the rendering served was made; None before the first."""
        if self._rendered_at is None:
            return None
        return max(0.0, self._clock() - self._rendered_at)

    def refresh(self) -> bool:
        """Render once, here; keep the previous rendering if this one fails."""
        try:
            body = self._render()
        except Exception as exc:  # noqa: BLE001 - whatever failed, the last good one is served
            log.warning("metrics: cluster series not refreshed (%s)", type(exc).__name__)
            return False
        self._body, self._rendered_at = body, self._clock()
        return True

    def _run(self) -> None:
        try:
            self.refresh()  # the first scrape finds series, however late it comes
            while not self._stop.is_set():
                self._wake.wait(self.refresh_s)
                self._wake.clear()
                if not self._stop.is_set() and self._scraped_lately():
                    self.refresh()
        finally:
            self._disconnect()

    def _scraped_lately(self) -> bool:
        idle_s = max(60.0, self.refresh_s * IDLE_AFTER_REFRESHES)
        return self._last_read is not None and self._clock() - self._last_read <= idle_s

    def _render_cluster(self) -> bytes:
        if self._connections is None:
            self._connections = _Connections.open(self.settings)
        try:
            registry = CollectorRegistry()
            registry.register(QueueCollector(self._connections))
            return generate_latest(registry)
        except Exception:
            self._disconnect()  # whatever broke, the next render connects afresh
            raise

    def _disconnect(self) -> None:
        connections, self._connections = self._connections, None
        if connections is not None:
            connections.close()


class ScrapeAge(Collector):
    """``llmq_metrics_cluster_age_seconds``: how old the cluster series served are."""

    def __init__(self, scrape: ClusterScrape) -> None:
        self._scrape = scrape

    def collect(self) -> Iterator[Metric]:
        age = self._scrape.age_s()
        if age is None:
            return
        family = GaugeMetricFamily(
            "llmq_metrics_cluster_age_seconds",
            "Seconds since the gateway last read the cluster's series (queues, workers, "
            "dead letters); it grows while Redis or the database cannot be read",
        )
        family.add_metric([], age)
        yield family
