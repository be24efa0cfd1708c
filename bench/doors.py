"""The fault benchmark's round at the doors: hostile HTTP, bad submits, cross-key probes.

It needs no engine: a private ``redis-server``, a scratch SQLite job database and a
real ``llmq gateway`` process, with no worker serving (an interactive request is then
refused with 503, a batch one queued), so thousands of cases take seconds.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

from bench.cross_key import cross_key_probe
from bench.gateway import gateway_process
from bench.http_fuzz import fuzz_gateway
from bench.redis_server import RedisServer, free_port
from bench.submit_fuzz import fuzz_submit
from producer.client import Client
from producer.gateway.keys import create_key
from schemas.settings import Settings

# Every case is its own request; the default limit would refuse most of them.
FUZZ_RATE_LIMIT_PER_MIN = 1_000_000


def fuzz_doors(settings: Settings, *, cases: int, seed: int) -> dict[str, Any]:
    """``cases`` HTTP cases and ``cases`` submits, and the cross-key probe; their counts.

    ``http_5xx`` (a 5xx other than a 503 that names its reason), ``submit_crashes`` (an
    exception that is not an ``LlmqError``) and ``cross_key_reads`` (one key seeing or
    touching another's job) must all be 0.
    """
    import migrations

    with tempfile.TemporaryDirectory(prefix="llmq-doors-") as scratch:
        server = RedisServer(Path(scratch))
        server.start()
        try:
            door_settings = settings.model_copy(
                update={
                    "broker_url": server.url,
                    "database_url": f"sqlite:///{Path(scratch) / 'doors.db'}",
                }
            )
            migrations.upgrade(door_settings.database_url)
            return _fuzz(door_settings, cases=cases, seed=seed)
        finally:
            server.stop()


def _fuzz(settings: Settings, *, cases: int, seed: int) -> dict[str, Any]:
    with Client(settings) as client:
        keys = [
            create_key(client.sessions, name, rate_limit_per_min=FUZZ_RATE_LIMIT_PER_MIN)[1]
            for name in ("fuzz-a", "fuzz-b")
        ]
        with gateway_process(settings, free_port()) as url:
            # Before the fuzzing: its bad credentials get this address refused a while.
            crossed = cross_key_probe(url, keys[0], keys[1], client=client)
            http = fuzz_gateway(url, api_keys=keys, cases=cases, seed=seed)
        submitted = fuzz_submit(client, cases=cases, seed=seed)
    return {
        "http_fuzz_cases": http.http_fuzz_cases,
        "http_5xx": http.http_5xx,
        "http_503": http.http_503,
        "http_transport_errors": http.transport_errors,
        "submit_fuzz_cases": submitted.submit_fuzz_cases,
        "submit_crashes": submitted.submit_crashes,
        "cross_key_attempts": crossed.cross_key_attempts,
        "cross_key_reads": crossed.cross_key_reads,
    }
