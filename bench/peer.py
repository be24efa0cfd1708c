"""``llmq bench peer``: vLLM's own OpenAI server against llmq's gateway, on one engine.

The honest comparison with the plain alternative: the same model folder and the same
engine settings (those llmq's worker uses for the tier), the same requests, and the
official ``openai`` SDK as the client on both sides. Only one engine is ever up: on a
small CPU host an idle vLLM engine's threads spin and slow any other, so the sides
run in alternating blocks (A B, B A...: ``bench.harness.in_block_order``), each
starting its own server and stopping it after.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import httpx

from bench.gateway import gateway_process
from bench.harness import (
    BENCH_PROMPT,
    StreamClock,
    StreamTiming,
    counted,
    in_block_order,
    rounded,
    step,
)
from bench.redis_server import RedisServer, free_port
from bench.spread import difference_interval, ratio_interval
from producer.gateway.keys import create_key
from schemas.percentiles import median, percentile
from schemas.queues import Tier
from schemas.settings import Settings
from workers.engine.vllm import engine_arguments
from workers.models import resolve_model
from workers.supervise import start_worker_process, stop_process, wait_until_warm

START_TIMEOUT_S = 900.0
WARMUP_REQUESTS = 3
SIDES = ("vllm", "llmq")


@dataclass(frozen=True)
class PeerPlan:
    """What each block measures."""

    blocks: int = 2
    single: int = 30
    max_tokens: int = 64
    concurrency: int = 16
    rounds: int = 2


@dataclass
class SideSamples:
    """Everything one side measured, over all its blocks."""

    ttft_ms: list[float] = field(default_factory=list)
    total_ms: list[float] = field(default_factory=list)
    itl_ms: list[float] = field(default_factory=list)
    tok_s: list[float] = field(default_factory=list)
    chunk_s: list[float] = field(default_factory=list)


@dataclass(frozen=True)
class Endpoint:
    """An OpenAI-compatible server to measure."""

    base_url: str
    api_key: str
    model: str


def run_peer(settings: Settings, *, tier: Tier, plan: PeerPlan) -> dict[str, Any]:
    """Alternate vLLM's server and llmq's gateway, ``plan.blocks`` blocks each."""
    import openai  # the test extra; a user's own client

    samples = {side: SideSamples() for side in SIDES}
    for block in range(plan.blocks):
        for side in in_block_order(SIDES, block):
            which = f"{side}, block {block + 1}/{plan.blocks}"
            with contextlib.ExitStack() as stack:
                with step(f"{which}: starting its server"):
                    endpoint = stack.enter_context(_server(side, settings, tier, plan.concurrency))
                sdk = openai.OpenAI(base_url=endpoint.base_url + "/v1", api_key=endpoint.api_key)
                _measure(sdk, endpoint.model, plan, samples[side], label=which)
    return _report(samples, tier, plan)


def _server(
    side: str, settings: Settings, tier: Tier, concurrency: int
) -> contextlib.AbstractContextManager[Endpoint]:
    if side == "vllm":
        return vllm_server(settings, tier, concurrency)
    return llmq_stack(settings, tier, concurrency)


@contextlib.contextmanager
def vllm_server(
    settings: Settings, tier: Tier, concurrency: int, *, server_flags: Sequence[str] = ()
) -> Iterator[Endpoint]:
    """``python -m vllm.entrypoints.openai.api_server`` with the tier's engine settings
    (and ``server_flags``, the server's own options, such as its tool-call parser)."""
    config = settings.tier(tier).model_copy(update={"concurrency": concurrency})
    model_path = resolve_model(config.model, settings.bundled_model_dir)
    port = free_port()
    command = [
        sys.executable,
        "-m",
        "vllm.entrypoints.openai.api_server",
        "--port",
        str(port),
        "--host",
        "127.0.0.1",
        "--served-model-name",
        tier.value,
        "--disable-uvicorn-access-log",
        *vllm_flags(engine_arguments(model_path, config)),
        *server_flags,
    ]
    with tempfile.TemporaryFile() as output:
        process = subprocess.Popen(
            command, stdout=output, stderr=subprocess.STDOUT, start_new_session=True
        )
        try:
            url = f"http://127.0.0.1:{port}"
            _wait_for(url + "/v1/models", process)
            yield Endpoint(url, "none", tier.value)
        finally:
            _stop_group(process)


def vllm_flags(arguments: dict[str, Any]) -> list[str]:
    """Command-line flags for vLLM's server that mean the same as ``AsyncEngineArgs``."""
    flags = ["--model", str(arguments["model"])]
    for name, value in arguments.items():
        if name == "model" or value is None:
            continue
        flag = "--" + name.replace("_", "-")
        if isinstance(value, bool):
            flags.append(flag if value else "--no-" + flag.removeprefix("--"))
        else:
            flags += [flag, str(value)]
    return flags


@contextlib.contextmanager
def llmq_stack(settings: Settings, tier: Tier, concurrency: int) -> Iterator[Endpoint]:
    """A private Redis, a SQLite job database, one warm worker and ``llmq gateway``."""
    import migrations

    with tempfile.TemporaryDirectory(prefix="llmq-peer-") as scratch:
        server = RedisServer(Path(scratch))
        server.start()
        stack_settings = settings.model_copy(
            update={
                "broker_url": server.url,
                "database_url": f"sqlite:///{Path(scratch) / 'peer.db'}",
            }
        )
        migrations.upgrade(stack_settings.database_url)
        with (Path(scratch) / "worker.log").open("wb") as log:
            worker = start_worker_process(stack_settings, tier, concurrency=concurrency, output=log)
        try:
            wait_until_warm(stack_settings, tier, worker, timeout=START_TIMEOUT_S)
            from schemas.db import make_engine, make_sessions

            db = make_engine(stack_settings.database_url)
            secret = create_key(make_sessions(db), "peer-bench", rate_limit_per_min=1_000_000)[1]
            db.dispose()
            with gateway_process(stack_settings, free_port()) as url:
                yield Endpoint(url, secret, tier.value)
        finally:
            stop_process(worker)
            server.stop()


def _wait_for(url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"vLLM's server exited with code {process.returncode}")
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=2).status_code == 200:
                return
        time.sleep(0.5)
    raise RuntimeError("vLLM's server did not start")


def _stop_group(process: subprocess.Popen[bytes]) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(process.pid, signal.SIGTERM)
    try:
        process.wait(timeout=60)
    except subprocess.TimeoutExpired:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(process.pid, signal.SIGKILL)
        process.wait()


def stream_once(sdk: Any, model: str, max_tokens: int) -> StreamTiming:
    """One streamed chat completion, greedy, timed from the call to the last chunk.

    Tokens are the server's own count (the usage chunk both servers send on request):
    under load a server may send several tokens in one chunk, so chunks undercount.
    """
    clock = StreamClock()
    stream = sdk.chat.completions.create(
        model=model,
        messages=[{"role": "user", "content": BENCH_PROMPT}],
        max_tokens=max_tokens,
        temperature=0.0,
        stream=True,
        stream_options={"include_usage": True},
    )
    tokens = None
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            clock.text()
        if chunk.usage is not None:
            tokens = chunk.usage.completion_tokens
    if tokens is None:
        raise RuntimeError("the server sent no usage chunk")
    return clock.timing(tokens)


def _measure(sdk: Any, model: str, plan: PeerPlan, samples: SideSamples, *, label: str) -> None:
    for _ in range(WARMUP_REQUESTS):
        stream_once(sdk, model, plan.max_tokens)
    for _ in counted(f"{label}: single streams", plan.single).track(range(plan.single)):
        timing = stream_once(sdk, model, plan.max_tokens)
        samples.ttft_ms.append(timing.ttft_ms)
        samples.total_ms.append(timing.total_ms)
        if timing.itl_ms is not None:
            samples.itl_ms.append(timing.itl_ms)
    what = f"{label}: {plan.concurrency} at once"
    for _ in counted(what, plan.rounds, unit="rounds").track(range(plan.rounds)):
        tok_s, chunk_s = concurrent_rates(lambda: stream_once(sdk, model, plan.max_tokens), plan)
        samples.tok_s.append(tok_s)
        samples.chunk_s.append(chunk_s)


def concurrent_rates(one: Callable[[], StreamTiming], plan: PeerPlan) -> tuple[float, float]:
    """Streamed tokens and chunks per second with ``plan.concurrency`` requests at once."""
    results: list[StreamTiming] = []
    lock = threading.Lock()

    def run() -> None:
        timing = one()
        with lock:
            results.append(timing)

    threads = [threading.Thread(target=run) for _ in range(plan.concurrency)]
    started = time.perf_counter()
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    elapsed = time.perf_counter() - started
    tokens = sum(timing.tokens for timing in results)
    return tokens / elapsed, sum(timing.chunks for timing in results) / elapsed


def _report(samples: dict[str, SideSamples], tier: Tier, plan: PeerPlan) -> dict[str, Any]:
    vllm, llmq = samples["vllm"], samples["llmq"]
    figures: dict[str, Any] = {
        "bench": "peer",
        "tier": tier.value,
        "blocks": plan.blocks,
        "n_single": len(vllm.ttft_ms),
        "max_tokens": plan.max_tokens,
        "concurrency": plan.concurrency,
    }
    for name, side in samples.items():
        figures[f"{name}_ttft_ms_p50"] = rounded(median(side.ttft_ms))
        figures[f"{name}_ttft_ms_p90"] = rounded(percentile(side.ttft_ms, 90))
        figures[f"{name}_total_ms_p50"] = rounded(median(side.total_ms))
        figures[f"{name}_itl_ms_p50"] = rounded(median(side.itl_ms))
        figures[f"{name}_tok_s_{plan.concurrency}"] = rounded(median(side.tok_s))
        figures[f"{name}_chunk_s_{plan.concurrency}"] = rounded(median(side.chunk_s))
        figures[f"{name}_ttft_samples_ms"] = [rounded(x) for x in side.ttft_ms]
        # One per round: a server's rate can move between its starts (where the kernel
        # puts its processes), which a median alone would hide.
        figures[f"{name}_tok_s_samples"] = [rounded(x) for x in side.tok_s]
    figures["ttft_ratio"] = _ratio(llmq.ttft_ms, vllm.ttft_ms)
    figures["ttft_ratio_ci95"] = ratio_interval(vllm.ttft_ms, llmq.ttft_ms)
    figures["ttft_added_ms"] = rounded(median(llmq.ttft_ms) - median(vllm.ttft_ms))
    figures["ttft_added_ms_ci95"] = difference_interval(vllm.ttft_ms, llmq.ttft_ms)
    figures["total_ratio"] = _ratio(llmq.total_ms, vllm.total_ms)
    figures["total_ratio_ci95"] = ratio_interval(vllm.total_ms, llmq.total_ms)
    figures["throughput_ratio"] = _ratio(llmq.tok_s, vllm.tok_s)
    return figures


def _ratio(ours: list[float], theirs: list[float]) -> float:
    return round(median(ours) / median(theirs), 3)
