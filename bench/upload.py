"""``llmq bench upload``: a large batch file, stored and enqueued, and the memory it took.

The lines go to a private ``redis-server`` (removed afterwards) and a scratch job
database, so no worker anywhere takes them; the batch queue's depth limit is raised
to fit them all. Peak memory is this process's (``ru_maxrss``), read after each step:
a file held whole would grow it with the line count.
"""

from __future__ import annotations

import json
import resource
import tempfile
import time
from pathlib import Path
from typing import Any

from bench.harness import bench_database, rounded, step
from bench.redis_server import RedisServer
from producer.batches import store
from producer.batches.enqueue import enqueue_batch
from producer.client import Client
from schemas.progress import ProgressBar
from schemas.queues import Priority, Tier
from schemas.settings import Settings

OWNER = "bench-upload"


def run_upload(settings: Settings, *, lines: int) -> dict[str, Any]:
    """Write a ``lines``-line batch file, store it, enqueue it; times and peak memory."""
    with tempfile.TemporaryDirectory(prefix="llmq-upload-") as scratch:
        folder = Path(scratch)
        path = folder / "batch.jsonl"
        with step(f"writing {lines} request lines"):
            write_requests(path, lines)
        file_mb = path.stat().st_size / 2**20
        server = RedisServer(folder)
        server.start()
        try:
            with bench_database(_roomy(settings, server.url, lines)) as ready:
                figures = _store_and_enqueue(ready, path, lines)
        finally:
            server.stop()
    return {"bench": "upload", "lines": lines, "file_mb": rounded(file_mb), **figures}


def write_requests(path: Path, lines: int) -> None:
    """``lines`` short chat requests in OpenAI's batch format."""
    with path.open("w", encoding="utf-8") as out:
        for index in range(lines):
            body = {
                "model": Tier.SMALL.value,
                "max_tokens": 8,
                "messages": [{"role": "user", "content": f"Is parcel {index} late? One word."}],
            }
            request = {"custom_id": f"r{index}", "method": "POST", "url": "/v1/chat/completions"}
            out.write(json.dumps({**request, "body": body}) + "\n")


def peak_rss_mb() -> float:
    """This process's peak resident memory so far (Linux reports KiB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _roomy(settings: Settings, broker_url: str, lines: int) -> Settings:
    """``settings`` on the private Redis, with a batch queue deep enough for every line."""
    config = settings.tier(Tier.SMALL)
    depth = {**config.max_queue_depth, Priority.BATCH: lines + 1}
    tiers = {**settings.tiers, Tier.SMALL: config.model_copy(update={"max_queue_depth": depth})}
    return settings.model_copy(update={"broker_url": broker_url, "tiers": tiers})


def _store_and_enqueue(settings: Settings, path: Path, lines: int) -> dict[str, Any]:
    before = peak_rss_mb()
    with Client(settings, warm=False) as client:
        started = time.perf_counter()
        with step("storing the file, line by line"), path.open("rb") as stream:
            uploaded = store.create_file(
                client.sessions,
                stream,
                filename=path.name,
                purpose=store.INPUT_PURPOSE,
                owner=OWNER,
                max_line_bytes=settings.max_body_bytes,
                max_lines=max(lines, store.MAX_LINES),  # a store measure, not the API's cap
            )
        stored = time.perf_counter()
        after_store = peak_rss_mb()
        batch = store.create_batch(
            client.sessions,
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window="24h",
            owner=OWNER,
        )
        with ProgressBar("enqueued", lines, unit="lines") as bar:
            enqueue_batch(client, batch.id, holder=OWNER, on_progress=bar)
        enqueued = time.perf_counter()
        row = store.get_batch(client.sessions, batch.id, owner=OWNER)
    return {
        "store_s": rounded(stored - started),
        "enqueue_s": rounded(enqueued - stored),
        "enqueue_lines_s": rounded(row.enqueued / (enqueued - stored)),
        "enqueued": row.enqueued,
        "peak_rss_mb_before": rounded(before),
        "peak_rss_mb_after_store": rounded(after_store),
        "peak_rss_mb_after_enqueue": rounded(peak_rss_mb()),
    }
