"""The gateway's cluster series: rendered off the loop, only while scraped, over
connections kept from one render to the next (real Redis and PostgreSQL)."""

from __future__ import annotations

import threading
import time

import pytest
from sqlalchemy.exc import OperationalError

from producer.client import Client
from producer.gateway import queue_metrics
from producer.gateway.scrape import ClusterScrape
from schemas.settings import Settings

pytestmark = pytest.mark.integration


class _CountedRenders:
    def __init__(self) -> None:
        self.count = 0
        self.rendered = threading.Event()

    def __call__(self) -> bytes:
        self.count += 1
        self.rendered.set()
        return b"series %d\n" % self.count


def test_renders_once_at_start_and_then_only_while_scraped(
    integration_settings: Settings,
) -> None:
    render = _CountedRenders()
    scrape = ClusterScrape(integration_settings, refresh_s=0.05, render=render)
    scrape.start()
    try:
        assert render.rendered.wait(5)
        time.sleep(0.5)  # ten periods, nobody scraping
        assert render.count == 1
        assert scrape.read() == b"series 1\n"  # the first scrape finds series
        deadline = time.monotonic() + 5
        while render.count < 3 and time.monotonic() < deadline:
            scrape.read()
            time.sleep(0.05)
        assert render.count >= 3  # scraped: rendered every period
    finally:
        scrape.stop()


def test_renders_reuse_their_connections_and_a_failed_one_drops_them(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(integration_settings) as client:
        client.submit("hello", tier="small", priority="batch")  # a queue to read the age of
    scrape = ClusterScrape(integration_settings, refresh_s=60)
    assert scrape.refresh()
    first = scrape._connections
    assert first is not None
    assert scrape.refresh()
    assert scrape._connections is first  # no new engine or client per render
    assert b"llmq_queue_depth" in scrape.read()

    def down(*_args: object) -> float:
        raise OperationalError("SELECT 1", {}, Exception("db down"))

    monkeypatch.setattr(queue_metrics, "oldest_waiting_age", down)
    assert not scrape.refresh()
    assert scrape._connections is None  # the next render connects afresh
    monkeypatch.undo()
    assert scrape.refresh()
    assert scrape._connections is not None and scrape._connections is not first
    scrape.start()
    scrape.stop()
    assert scrape._connections is None  # stopping closes them
