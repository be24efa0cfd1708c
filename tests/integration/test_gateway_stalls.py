"""No request, tenant or file stalls the gateway for everyone, over real Redis and PostgreSQL.

``/metrics`` is served from a rendering made off the event loop, ``/readyz`` from a
recent check; both stay fast and cheap however often they are called.
"""

from __future__ import annotations

import asyncio
import io
import json
import threading
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import pytest
from sqlalchemy import event, text
from sqlalchemy.exc import OperationalError
from starlette.testclient import TestClient

from producer.batches import content, store
from producer.batches.runner import BatchRunner
from producer.client import Client
from producer.gateway import queue_metrics
from producer.gateway.app import create_app
from producer.gateway.context import GatewayContext
from producer.gateway.keys import create_key
from producer.gateway.pacing import BytePacer
from schemas.db import engine_of, make_engine, make_sessions
from schemas.errors import InvalidRequest
from schemas.queues import Priority, Tier
from schemas.settings import Settings, TierConfig
from tests.gateway_server import running_gateway
from tests.integration.test_batches import _new_batch, _upload, clear_batches, jsonl, line

pytestmark = pytest.mark.integration


def new_key(settings: Settings, name: str = "k") -> dict[str, str]:
    engine = make_engine(settings.database_url)
    _identity, secret = create_key(make_sessions(engine), name, rate_limit_per_min=6000)
    engine.dispose()
    return {"Authorization": f"Bearer {secret}"}


def series(text: str) -> dict[str, float]:
    return {
        line.split(" ")[0]: float(line.split(" ")[1])
        for line in text.splitlines()
        if line.startswith("llmq_")
    }


BATCH_DEPTH = 'llmq_queue_depth{priority="batch",queue="llm.small.batch",tier="small"}'


def scrape_until(http: httpx.Client, check: Any, headers: dict[str, str] | None = None) -> str:
    deadline = time.monotonic() + 10
    while True:
        response = http.get("/metrics", headers=headers)
        assert response.status_code == 200, response.text
        if check(series(response.text)) or time.monotonic() > deadline:
            return response.text
        time.sleep(0.05)


@pytest.fixture
def fast_metrics(integration_settings: Settings) -> Settings:
    return integration_settings.model_copy(
        update={"metrics_refresh_s": 0.1, "metrics_require_key": False}
    )


def test_a_slow_cluster_read_never_holds_up_other_requests(
    fast_metrics: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    original = queue_metrics.QueueCollector.collect

    def slow(self: queue_metrics.QueueCollector) -> Iterator[Any]:
        time.sleep(1.5)  # a SCAN of a large keyspace, a slow database
        yield from original(self)

    monkeypatch.setattr(queue_metrics.QueueCollector, "collect", slow)
    with running_gateway(fast_metrics) as url, httpx.Client(base_url=url, timeout=30) as http:
        took: list[float] = []

        def scrape() -> None:
            started = time.perf_counter()
            assert http.get("/metrics").status_code == 200
            took.append(time.perf_counter() - started)

        scrapers = [threading.Thread(target=scrape) for _ in range(3)]
        for thread in scrapers:
            thread.start()
        time.sleep(0.1)
        started = time.perf_counter()
        assert http.get("/healthz").status_code == 200
        health_s = time.perf_counter() - started
        for thread in scrapers:
            thread.join()
    assert health_s < 0.5, f"/healthz waited {health_s:.2f} s behind /metrics"
    assert max(took) < 0.5, f"a scrape took {max(took):.2f} s"


def test_a_database_error_serves_the_last_good_scrape(
    fast_metrics: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    with Client(fast_metrics) as client:
        for _ in range(2):
            client.submit("hello", tier="small", priority="batch")
    with running_gateway(fast_metrics) as url, httpx.Client(base_url=url) as http:
        good = series(scrape_until(http, lambda s: s.get(BATCH_DEPTH) == 2))
        assert good[BATCH_DEPTH] == 2

        def down(*_args: object) -> float:
            raise OperationalError("SELECT created_at FROM jobs", {}, Exception("db down"))

        monkeypatch.setattr(queue_metrics, "oldest_waiting_age", down)
        time.sleep(0.5)  # a few refreshes fail meanwhile
        response = http.get("/metrics")
        assert response.status_code == 200, response.text
        assert "SELECT" not in response.text
        stale = series(response.text)
        assert stale[BATCH_DEPTH] == 2
        assert stale["llmq_metrics_cluster_age_seconds"] >= 0.3


def test_metrics_needs_a_key_when_keys_are_on(integration_settings: Settings) -> None:
    headers = new_key(integration_settings)
    with running_gateway(integration_settings) as url, httpx.Client(base_url=url) as http:
        refused = http.get("/metrics")
        assert refused.status_code == 401, refused.text
        assert refused.json()["error"]["code"] == "invalid_api_key"
        bad = http.get("/metrics", headers={"Authorization": "Bearer llmq-guess"})
        assert bad.status_code == 401
        assert "llmq_gateway_requests" in scrape_until(http, lambda s: True, headers)
    open_metrics = integration_settings.model_copy(update={"metrics_require_key": False})
    with running_gateway(open_metrics) as url, httpx.Client(base_url=url) as http:
        assert http.get("/metrics").status_code == 200
    # Without keys there is nothing to ask for.
    with (
        running_gateway(integration_settings, require_keys=False) as url,
        httpx.Client(base_url=url) as http,
    ):
        assert http.get("/metrics").status_code == 200


def test_readyz_is_answered_from_a_recent_check_and_writes_nothing(
    integration_settings: Settings,
) -> None:
    clear_batches(integration_settings.database_url)
    app = create_app(integration_settings.model_copy(update={"readyz_cache_s": 30.0}))
    with TestClient(app) as http:
        gateway: GatewayContext = app.state.gateway
        statements: list[str] = []

        def count(_conn: object, _cursor: object, statement: str, *_rest: object) -> None:
            statements.append(statement)

        engine = engine_of(gateway.client.sessions)
        event.listen(engine, "before_cursor_execute", count)
        try:
            for _ in range(30):
                assert http.get("/readyz").json() == {"status": "ready"}
        finally:
            event.remove(engine, "before_cursor_execute", count)
    assert not [s for s in statements if s.lstrip().upper().startswith("INSERT")], statements
    # (The batch runner shares the engine: its sweeps are not the probe's.)
    probes = [s for s in statements if "batch" not in s]
    assert len(probes) <= 2, probes


def test_a_probe_flood_from_one_address_is_held_to_its_rate_and_never_refused(
    integration_settings: Settings,
) -> None:
    rate, flood_s = 10.0, 2.0
    paced = integration_settings.model_copy(
        update={"probe_requests_per_s": rate, "metrics_require_key": False}
    )
    statuses: list[int] = []
    with running_gateway(paced) as url:
        stop = time.monotonic() + flood_s

        def flood(path: str) -> None:
            with httpx.Client(base_url=url, timeout=10) as http:
                while time.monotonic() < stop:
                    statuses.append(http.get(path).status_code)

        threads = [threading.Thread(target=flood, args=(p,)) for p in ("/healthz", "/readyz")]
        threads += [threading.Thread(target=flood, args=("/metrics",))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        with httpx.Client(base_url=url) as http:
            started = time.monotonic()
            assert http.get("/v1/models", headers=new_key(paced)).status_code == 200
            assert time.monotonic() - started < 1.0, "the API is not paced with the probes"
    # A second's worth at once, then the rate (the last wait may end past the flood).
    assert len(statuses) <= rate * (flood_s + 1) + 3, len(statuses)
    assert len(statuses) >= rate * flood_s
    assert set(statuses) == {200}, "a wait this short is never a refusal"


def test_batch_feeders_waiting_on_a_full_queue_leave_the_default_pool_free(
    integration_settings: Settings,
) -> None:
    clear_batches(integration_settings.database_url)
    tier = TierConfig(max_queue_depth={Priority.INTERACTIVE: 10, Priority.BATCH: 1})
    settings = integration_settings.model_copy(
        update={"tiers": {**integration_settings.tiers, Tier.SMALL: tier}}
    )

    async def scenario(client: Client) -> float:
        # The default pool of a 2-core host (6 threads) or smaller.
        asyncio.get_running_loop().set_default_executor(ThreadPoolExecutor(4))
        runner = BatchRunner(client, interval_s=0.2)
        runner.start()
        try:
            await asyncio.sleep(1.5)  # every feeder has met the full batch queue by now
            started = time.perf_counter()
            # What a key check or an interactive submit does: a short call in the pool.
            await asyncio.wait_for(asyncio.to_thread(lambda: None), 3)
            return time.perf_counter() - started
        finally:
            await runner.stop()

    with Client(settings) as client:
        for b in range(6):
            _new_batch(client, [line(f"b{b}-{i}") for i in range(3)])
        waited = asyncio.run(scenario(client))
    assert waited < 0.5


def test_a_slow_download_holds_no_database_connection(integration_settings: Settings) -> None:
    clear_batches(integration_settings.database_url)
    with Client(integration_settings) as client:
        source = _upload(client, [line(f"r{i}") for i in range(1200)])  # pages of 500 rows
        pool = engine_of(client.sessions).pool
        pieces = content.file_content(client.sessions, source)
        first = next(pieces)  # the reader pauses here, as a slow client would
        assert pool.checkedout() == 0  # type: ignore[attr-defined]
        rest = b"".join(pieces)
    lines = (first + rest).decode().splitlines()
    assert [json.loads(text)["custom_id"] for text in lines] == [f"r{i}" for i in range(1200)]


def stored_line_count(settings: Settings) -> int:
    engine = make_engine(settings.database_url)
    with engine.connect() as conn:
        count = conn.execute(text("SELECT count(*) FROM batch_file_lines")).scalar_one()
    engine.dispose()
    return int(count)


def test_an_upload_over_the_line_cap_is_a_400_that_keeps_nothing(
    integration_settings: Settings,
) -> None:
    clear_batches(integration_settings.database_url)
    settings = integration_settings.model_copy(update={"batch_max_lines": 5})
    headers = new_key(settings)

    def upload(http: httpx.Client, lines: int) -> httpx.Response:
        body = ("\n".join(line(f"r{i}") for i in range(lines)) + "\n\n").encode()
        files = {"file": ("r.jsonl", body, "application/jsonl")}
        return http.post("/v1/files", files=files, data={"purpose": "batch"}, headers=headers)

    with running_gateway(settings) as url, httpx.Client(base_url=url) as http:
        assert upload(http, 5).status_code == 200  # blank lines are not requests
        refused = upload(http, 6)
    assert refused.status_code == 400, refused.text
    message = refused.json()["error"]["message"]
    assert message == "the file has more than 5 request lines, the limit of one batch"
    assert stored_line_count(settings) == 5  # the accepted file's only


def test_an_over_long_line_is_a_400_read_no_further_than_the_limit(
    integration_settings: Settings,
) -> None:
    clear_batches(integration_settings.database_url)
    first = (line("a") + "\n").encode()
    stream = io.BytesIO(first + b"x" * (5 << 20))  # 5 MiB and no newline
    with Client(integration_settings) as client, pytest.raises(InvalidRequest) as refused:
        store.create_file(
            client.sessions,
            stream,
            filename="r.jsonl",
            purpose="batch",
            owner="team",
            max_line_bytes=4096,
        )
    assert str(refused.value) == "line 2 of the file is longer than the limit of 4096 bytes a line"
    assert stream.tell() <= len(first) + 4096 + 2
    assert stored_line_count(integration_settings) == 0


def test_a_large_upload_is_stored_in_short_transactions(db_settings: Settings) -> None:
    clear_batches(db_settings.database_url)
    with Client(db_settings) as client:
        commits: list[int] = []
        engine = engine_of(client.sessions)
        listener = lambda _conn: commits.append(1)  # noqa: E731
        event.listen(engine, "commit", listener)
        try:
            stored = _upload(client, [line(f"r{i}") for i in range(2500)])
        finally:
            event.remove(engine, "commit", listener)
    assert stored.lines == 2500
    assert len(commits) >= 3  # a chunk of 1000 lines a transaction, then the file's row
    assert stored_line_count(db_settings) == 2500


def test_uploads_are_stored_at_their_shared_byte_budget(db_settings: Settings) -> None:
    clear_batches(db_settings.database_url)
    body = jsonl(*[line(f"r{i}") for i in range(2500)])
    budget = BytePacer(len(body) / 0.5, burst=1)  # the whole file in half a second
    paced: list[int] = []

    def pace(size: int) -> None:
        paced.append(size)
        budget.take_blocking(size)

    with Client(db_settings) as client:
        started = time.monotonic()
        stored = store.create_file(
            client.sessions,
            io.BytesIO(body),
            filename="r.jsonl",
            purpose="batch",
            owner="team",
            max_line_bytes=1 << 20,
            pace=pace,
        )
        took = time.monotonic() - started
    assert stored.lines == 2500
    assert len(paced) == 3, "one take per chunk of lines"
    assert sum(paced) == len(body) == stored.bytes
    assert took >= 0.4, f"the budget held the upload to its rate, took {took:.2f} s"


def test_slow_uploads_leave_key_checks_their_threads(
    integration_settings: Settings, monkeypatch: pytest.MonkeyPatch
) -> None:
    clear_batches(integration_settings.database_url)
    # Every upload at once in the Batch API's pool: what is measured is which pool.
    settings = integration_settings.model_copy(update={"batch_api_threads": 40})
    uploader = new_key(settings, "uploader")
    original = store.create_file

    def slow(*args: Any, **kwargs: Any) -> Any:
        time.sleep(4.0)  # a large file on a busy database
        return original(*args, **kwargs)

    monkeypatch.setattr(store, "create_file", slow)
    body = (line("a") + "\n").encode()
    with running_gateway(settings) as url, httpx.Client(base_url=url) as http:
        assert http.get("/v1/models", headers=uploader).status_code == 200  # its key cached

        def upload() -> None:
            files = {"file": ("r.jsonl", body, "application/jsonl")}
            with httpx.Client(base_url=url, timeout=120) as own:
                own.post("/v1/files", files=files, data={"purpose": "batch"}, headers=uploader)

        # More than any default pool (at most 32 threads) could run at once.
        uploads = [threading.Thread(target=upload) for _ in range(40)]
        for thread in uploads:
            thread.start()
        time.sleep(2.0)  # every upload is parsed and in store.create_file by now
        fresh = new_key(settings, "fresh")  # not cached: checked in a thread
        started = time.perf_counter()
        assert http.get("/v1/models", headers=fresh).status_code == 200
        waited = time.perf_counter() - started
        for thread in uploads:
            thread.join()
    assert waited < 1.0, f"a key check waited {waited:.2f} s behind uploads"
