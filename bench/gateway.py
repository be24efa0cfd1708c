"""``llmq bench gateway``: what the OpenAI-compatible gateway adds to time-to-first-token."""

from __future__ import annotations

import contextlib
import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import httpx

from bench.harness import (
    Rig,
    bench_rig,
    paired_samples,
    queued_ttft_ms,
    request_fields,
    rounded,
    step,
)
from producer.gateway.keys import create_key
from schemas.percentiles import median
from schemas.queues import Tier
from schemas.settings import Settings
from workers.supervise import stop_process

START_TIMEOUT_S = 60.0


def run_gateway(
    settings: Settings, *, tier: Tier, samples: int, max_tokens: int, port: int
) -> dict[str, Any]:
    """Alternate the same streamed request through the gateway and the Python client."""
    with bench_rig(settings, tier, prefill_prompts=False) as rig:
        secret = create_key(rig.client.sessions, "bench")[1]
        with gateway_process(rig.settings, port) as url, httpx.Client(base_url=url) as http:
            headers = {"Authorization": f"Bearer {secret}"}
            via_gateway, via_client = paired_samples(
                lambda _index: gateway_ttft_ms(http, headers, rig, max_tokens),
                lambda _index: queued_ttft_ms(rig, max_tokens),
                samples=samples,
                label="gateway and client, alternating",
            )
    return {
        "bench": "gateway",
        "tier": tier.value,
        "n": samples,
        "max_tokens": max_tokens,
        "gateway_ttft_ms_p50": rounded(median(via_gateway)),
        "client_ttft_ms_p50": rounded(median(via_client)),
        "added_ms_p50": rounded(median(via_gateway) - median(via_client)),
        "added_ms_paired_p50": rounded(
            median(g - c for g, c in zip(via_gateway, via_client, strict=True))
        ),
        # Every sample, for the report's distribution plots.
        "gateway_ttft_samples_ms": [rounded(x) for x in via_gateway],
        "client_ttft_samples_ms": [rounded(x) for x in via_client],
    }


def gateway_ttft_ms(
    http: httpx.Client, headers: dict[str, str], rig: Rig, max_tokens: int
) -> float:
    """POST a streamed chat completion; time to the first chunk with content."""
    body = {"model": rig.tier.value, "stream": True, **request_fields(max_tokens)}
    started = time.perf_counter()
    ttft = None
    with http.stream("POST", "/v1/chat/completions", json=body, headers=headers) as response:
        response.raise_for_status()
        for line in response.iter_lines():
            if ttft is None and '"content"' in line:
                ttft = (time.perf_counter() - started) * 1000.0
    if ttft is None:
        raise RuntimeError("the gateway streamed no text")
    return ttft


@contextlib.contextmanager
def gateway_process(
    settings: Settings, port: int, *, env: Mapping[str, str] | None = None
) -> Iterator[str]:
    """``llmq gateway`` as its own process, as it runs in production; ``env`` adds
    settings of its own (``LLMQ_*`` variables)."""
    variables = {
        **os.environ,
        "LLMQ_BROKER_URL": settings.broker_url,
        "LLMQ_DATABASE_URL": settings.database_url,
        **(env or {}),
    }
    command = [sys.executable, "-m", "producer.cli", "gateway", "--port", str(port)]
    process = subprocess.Popen(command, env=variables)
    url = f"http://127.0.0.1:{port}"
    try:
        with step("starting the gateway"):
            _wait_healthy(url, process)
        yield url
    finally:
        stop_process(process, grace_s=10)


def _wait_healthy(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while True:
        try:
            if httpx.get(url + "/healthz", timeout=1).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        if time.monotonic() > deadline or process.poll() is not None:
            raise RuntimeError("the gateway did not start")
        time.sleep(0.2)
