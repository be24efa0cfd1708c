"""The mixed bench's llmq side reads its worker's batch share from the registry."""

from __future__ import annotations

from pathlib import Path

import redis

from bench.mixed_sides import LlmqSide
from schemas.queues import Tier
from schemas.registry import WorkerEntry, write_entry
from schemas.settings import Settings


def test_the_llmq_side_reports_its_workers_share_cuts(tmp_path: Path) -> None:
    side = LlmqSide(Settings(), tmp_path, Tier.SMALL)  # starts its own Redis, nothing else
    try:
        assert side.share() == {}  # no worker yet
        entry = WorkerEntry(
            worker_id="small-1@test",
            tier=Tier.SMALL,
            warm=True,
            concurrency=16,
            batch_under_interactive=5,
            interactive_ttft_slo_ms=1000.0,
            batch_share_cuts=3,
        )
        client = redis.Redis.from_url(side.settings.broker_url)
        write_entry(client, entry, expiry_s=60)
        client.close()
        assert side.share() == {"batch_share_cuts": 3, "batch_under_interactive": 5}
    finally:
        side.stop()
    assert side.share() == {}  # its Redis is gone: no figures, no error
