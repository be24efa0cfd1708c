"""The Grafana dashboard and the alert rules query only series llmq really exports."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client import CollectorRegistry

from producer.gateway.metrics import GatewayMetrics
from producer.gateway.queue_metrics import QueueCollector
from schemas.queues import Tier
from schemas.registry import WorkerEntry
from workers.metrics import WorkerMetrics

ROOT = Path(__file__).resolve().parents[2]
DASHBOARD = ROOT / "deploy" / "grafana" / "llmq.json"
ALERTS = ROOT / "deploy" / "prometheus" / "alerts.yml"

# Series Prometheus makes itself, and PromQL words that look like names.
BUILTIN_SERIES = {"up"}
KEYWORDS = {
    "by", "without", "on", "ignoring", "group_left", "group_right",
    "and", "or", "unless", "bool", "offset", "inf", "nan", "le",
    # Aggregations may take their label list first: sum by (tier) (...).
    "sum", "min", "max", "avg", "group", "stddev", "stdvar", "count", "count_values",
    "bottomk", "topk", "quantile",
}  # fmt: skip
SUFFIXES = {
    "counter": ("_total", "_created"),
    "histogram": ("_bucket", "_sum", "_count", "_created"),
    "gauge": ("",),
}


class _FakeRedis:
    def __init__(self) -> None:
        entry = WorkerEntry(worker_id="small-1-a@h", tier=Tier.SMALL, warm=True)
        self._hashes: dict[str, Any] = {"llmq:worker:small-1-a@h": entry.encode()}

    def smembers(self, _key: str) -> set[bytes]:
        return {k.removeprefix("llmq:worker:").encode() for k in self._hashes}

    def pipeline(self, **_options: Any) -> _FakePipeline:
        return _FakePipeline(self)

    def hgetall(self, key: str | bytes) -> dict[bytes, bytes]:
        name = key.decode() if isinstance(key, bytes) else key
        if name in self._hashes:
            return {k.encode(): str(v).encode() for k, v in self._hashes[name].items()}
        return {b"small:classified": b"3"}

    def lindex(self, _queue: str, _index: int) -> None:
        return None


class _FakePipeline:
    def __init__(self, redis: _FakeRedis) -> None:
        self._redis = redis
        self._keys: list[str] = []

    def hgetall(self, key: str) -> None:
        self._keys.append(key)

    def execute(self) -> list[dict[bytes, bytes]]:
        return [self._redis.hgetall(key) for key in self._keys]


class _FakeClient:
    """What QueueCollector reads: queue depths, the registry, routing counts, job rows."""

    def __init__(self, sessions: Any) -> None:
        self.redis = _FakeRedis()
        self.sessions = sessions

    def queue_depths(self) -> list[Any]:
        from producer.status import QueueDepth
        from schemas.queues import Priority

        return [QueueDepth(t, p, 0) for t in Tier for p in Priority]


def exported_series(tmp_path: Path) -> set[str]:
    """Every series name the workers and the gateway export, from their own registries."""
    from schemas.db import make_engine, make_sessions
    from schemas.tables import Base

    registries: list[CollectorRegistry] = [
        WorkerMetrics(tier="small", slots=4, in_flight=lambda: 0).registry,
        GatewayMetrics().registry,
    ]
    db = make_engine(f"sqlite:///{tmp_path / 'jobs.db'}")
    Base.metadata.create_all(db)
    queues = CollectorRegistry()
    queues.register(QueueCollector(_FakeClient(make_sessions(db))))  # type: ignore[arg-type]
    registries.append(queues)
    names: set[str] = set()
    for registry in registries:
        for family in registry.collect():
            names.update(family.name + suffix for suffix in SUFFIXES[family.type])
    db.dispose()
    return names


def dashboard_expressions() -> list[str]:
    dashboard = json.loads(DASHBOARD.read_text())
    panels = [p for p in dashboard["panels"] if p["type"] != "row"]
    return [target["expr"] for panel in panels for target in panel["targets"]]


def alert_expressions() -> list[str]:
    rules = yaml.safe_load(ALERTS.read_text())
    return [rule["expr"] for group in rules["groups"] for rule in group["rules"]]


def metric_names(expr: str) -> set[str]:
    """The series names a PromQL expression selects.

    Removes strings, label matchers, ranges and label lists after by/without/on/
    ignoring/group_*; what is left that is a name and not a function call or keyword
    is a metric name.
    """
    text = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    text = re.sub(r"\{[^}]*\}", "", text)
    text = re.sub(r"\[[^\]]*\]", "", text)
    text = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", r"\1", text)
    names = set()
    for match in re.finditer(r"(?<![\w.$])([a-zA-Z_:][\w:]*)(\s*\()?", text):
        name, call = match.group(1), match.group(2)
        if call or name.lower() in KEYWORDS:
            continue
        names.add(name)
    return names


def balanced(expr: str) -> bool:
    pairs = {")": "(", "]": "[", "}": "{"}
    stack: list[str] = []
    for char in re.sub(r'"(?:[^"\\]|\\.)*"', "", expr):
        if char in "([{":
            stack.append(char)
        elif char in pairs and (not stack or stack.pop() != pairs[char]):
            return False
    return not stack


def test_the_name_extraction_skips_functions_labels_and_keywords() -> None:
    expr = (
        'histogram_quantile(0.95, sum by (tier, le) (rate(llmq_a_bucket{priority="x"}[5m])))'
        " > 2 and on (tier) llmq_b == 0"
    )
    assert metric_names(expr) == {"llmq_a_bucket", "llmq_b"}


@pytest.mark.parametrize("source", ["dashboard", "alerts"])
def test_every_expression_names_only_exported_series(source: str, tmp_path: Path) -> None:
    exported = exported_series(tmp_path) | BUILTIN_SERIES
    expressions = dashboard_expressions() if source == "dashboard" else alert_expressions()
    assert expressions
    for expr in expressions:
        assert balanced(expr), expr
        names = metric_names(expr)
        assert names, f"no series in {expr!r}"
        assert names <= exported, f"{expr!r} names unexported {sorted(names - exported)}"


def test_the_dashboard_covers_what_the_issue_asks_for() -> None:
    text = " ".join(dashboard_expressions())
    for series in (
        "llmq_worker_ttft_seconds_bucket",
        "llmq_worker_tpot_seconds_bucket",
        "llmq_worker_queue_wait_seconds_bucket",
        "llmq_queue_depth",
        "llmq_queue_oldest_age_seconds",
        "llmq_worker_free_slots",
        "llmq_worker_jobs_total",
        "llmq_routing_decisions_total",
    ):
        assert series in text
    kinds = {p["type"] for p in json.loads(DASHBOARD.read_text())["panels"]}
    assert {"heatmap", "timeseries", "stat"} <= kinds


def test_alerts_have_the_four_asked_for_and_read_well() -> None:
    rules = [r for g in yaml.safe_load(ALERTS.read_text())["groups"] for r in g["rules"]]
    names = {r["alert"] for r in rules}
    assert {
        "LlmqInteractiveQueueWaitOverSlo",
        "LlmqNoWarmWorker",
        "LlmqDeadLetters",
        "LlmqRedisDown",
    } <= names
    for rule in rules:
        assert rule["annotations"]["summary"]
        assert rule["labels"]["severity"] in {"page", "ticket"}


@pytest.mark.skipif(shutil.which("promtool") is None, reason="promtool (Debian prometheus) absent")
def test_promtool_accepts_the_rules() -> None:
    checked = subprocess.run(
        ["promtool", "check", "rules", str(ALERTS)], capture_output=True, text=True, check=False
    )
    assert checked.returncode == 0, checked.stdout + checked.stderr
