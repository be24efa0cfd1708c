"""What every benchmark needs: a direct engine, a queued worker, the same prompt for both,
and its progress on stderr (:func:`step` for what nobody counts, :func:`counted` for
requests; stdout keeps only the figures).
"""

from __future__ import annotations

import contextlib
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from producer.client import Client
from schemas.jobs import JobResult
from schemas.progress import ProgressBar
from schemas.queues import Tier
from schemas.settings import Settings
from workers.engine.base import SamplingOptions
from workers.engine.vllm import VllmEngine
from workers.models import resolve_model
from workers.supervise import start_worker_process, stop_process, wait_until_warm

BENCH_PROMPT = "What are your opening hours on weekends?"


def step(what: str) -> ProgressBar:
    """One step of a bench nobody counts (an engine starting, a trace replaying): on
    stderr, its elapsed time while it runs, then how long it took. Use it in ``with``."""
    return ProgressBar(what)


def counted(what: str, total: int, *, unit: str = "requests") -> ProgressBar:
    """A bar on stderr over ``total`` things (done/total, rate, ETA); ``advance()`` it."""
    return ProgressBar(what, total, unit=unit)


@dataclass
class Rig:
    """A direct in-process engine and a client talking to a worker on the same model."""

    settings: Settings
    engine: VllmEngine | None
    client: Client
    tier: Tier


@contextlib.contextmanager
def bench_database(settings: Settings) -> Iterator[Settings]:
    """``settings`` with the job database a benchmark uses, migrated: a fresh SQLite file
    (removed afterwards) unless ``LLMQ_DATABASE_URL`` names another, so a benchmark never
    mixes its rows with real ones."""
    import migrations

    with tempfile.TemporaryDirectory(prefix="llmq-bench-db-") as scratch:
        settings = _bench_settings(settings, Path(scratch))
        migrations.upgrade(settings.database_url)
        yield settings


@contextlib.contextmanager
def bench_rig(
    settings: Settings, tier: Tier, *, concurrency: int, direct_engine: bool = True
) -> Iterator[Rig]:
    """Start both paths on ``tier``'s model; the worker runs as its own process.

    The job database is :func:`bench_database`'s.
    """
    with (
        bench_database(settings) as ready,
        tempfile.TemporaryDirectory(prefix="llmq-bench-") as scratch,
    ):
        config = ready.tier(tier)
        model_path = resolve_model(config.model, ready.bundled_model_dir)
        log = (Path(scratch) / "worker.log").open("wb")
        worker = start_worker_process(ready, tier, concurrency=concurrency, output=log)
        engine = None
        also = " and an engine in this process" if direct_engine else ""
        try:
            with step(f"starting a {tier} worker{also}"):
                if direct_engine:
                    engine = VllmEngine.start(model_path=model_path, config=config)
                wait_until_warm(ready, tier, worker)
            with Client(ready) as client:
                yield Rig(settings=ready, engine=engine, client=client, tier=tier)
        finally:
            stop_process(worker)
            if engine is not None:
                engine.shutdown()
            log.close()


def _bench_settings(settings: Settings, scratch: Path) -> Settings:
    if settings.database_url != Settings.model_fields["database_url"].default:
        return settings
    return settings.model_copy(update={"database_url": f"sqlite:///{scratch / 'bench.db'}"})


def request_fields(max_tokens: int) -> dict[str, object]:
    """The request both paths serve: same prompt, greedy, so outputs match."""
    return {
        "messages": [{"role": "user", "content": BENCH_PROMPT}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }


def direct_engine(rig: Rig) -> VllmEngine:
    """The in-process engine; only rigs started with ``direct_engine=True`` have one."""
    assert rig.engine is not None, "this benchmark runs no direct engine"
    return rig.engine


def direct_options(max_tokens: int) -> SamplingOptions:
    return SamplingOptions(max_tokens=max_tokens, temperature=0.0)


def direct_ttft_ms(
    rig: Rig,
    request_id: str,
    max_tokens: int,
    messages: list[dict[str, str]] | None = None,
) -> float:
    """Time to first text from calling the engine directly (prompt rendering included)."""
    engine = direct_engine(rig)
    started = time.perf_counter()
    prompt = engine.render_chat(messages or [{"role": "user", "content": BENCH_PROMPT}])
    ttft: float | None = None
    # Run each request to its end, as the queued path does, so both start idle.
    for delta in engine.stream(prompt, direct_options(max_tokens), request_id):
        if delta.text and ttft is None:
            ttft = (time.perf_counter() - started) * 1000.0
    if ttft is None:
        raise RuntimeError("the engine produced no text")
    return ttft


@dataclass(frozen=True)
class StreamTiming:
    """One streamed answer as its reader saw it: first text, last text, pieces of text."""

    ttft_ms: float
    total_ms: float
    chunks: int

    @property
    def itl_ms(self) -> float | None:
        """Mean time between pieces of text after the first (inter-token latency)."""
        if self.chunks < 2:
            return None
        return (self.total_ms - self.ttft_ms) / (self.chunks - 1)


class StreamClock:
    """Times one stream: call :meth:`text` on each piece of text, then :meth:`timing`."""

    def __init__(self) -> None:
        self.started = time.perf_counter()
        self.first: float | None = None
        self.last = self.started
        self.chunks = 0

    def text(self) -> None:
        self.last = time.perf_counter()
        self.first = self.first or self.last
        self.chunks += 1

    def timing(self) -> StreamTiming:
        if self.first is None:
            raise RuntimeError("no text was streamed")
        to_ms = 1000.0
        return StreamTiming(
            (self.first - self.started) * to_ms, (self.last - self.started) * to_ms, self.chunks
        )


def direct_timing(engine: VllmEngine, request_id: str, max_tokens: int) -> StreamTiming:
    """A request straight into an engine in this process (prompt rendering included)."""
    clock = StreamClock()
    prompt = engine.render_chat([{"role": "user", "content": BENCH_PROMPT}])
    for delta in engine.stream(prompt, direct_options(max_tokens), request_id):
        if delta.text:
            clock.text()
    return clock.timing()


def queued_timing(rig: Rig, max_tokens: int) -> StreamTiming:
    """The same request through submit → Redis → worker → pub/sub → client."""
    clock = StreamClock()
    handle = rig.client.submit(request_fields(max_tokens), tier=rig.tier)
    for _chunk in handle.stream(timeout=300):
        clock.text()
    return clock.timing()


def queued_ttft_ms(rig: Rig, max_tokens: int, request: dict[str, object] | None = None) -> float:
    """Time to first text through submit → Redis → worker → pub/sub → client."""
    return queued_sample(rig, request or request_fields(max_tokens))[0]


def queued_sample(rig: Rig, request: dict[str, object]) -> tuple[float, JobResult]:
    """TTFT through the whole queue path, and the job's result (drained before returning)."""
    started = time.perf_counter()
    handle = rig.client.submit(request, tier=rig.tier)
    for _chunk in handle.stream(timeout=300):
        ttft = (time.perf_counter() - started) * 1000.0
        # Drain, so the next sample starts on an idle engine.
        return ttft, handle.result(timeout=300)
    raise RuntimeError("the job produced no text")


PAIRED_WARMUP_ROUNDS = 3
# Both paths start each sample from an idle machine: the previous job's tail work
# (acks, row updates) must not be billed to the next request.
SETTLE_S = 0.05


def paired_samples(
    first: Callable[[int], float],
    second: Callable[[int], float],
    *,
    samples: int,
    label: str = "paired samples",
) -> tuple[list[float], list[float]]:
    """Alternate ``first`` and ``second`` (each given the round number), after warm-up rounds.

    Alternating pairs keeps a noisy machine's drift out of the comparison.
    """
    a: list[float] = []
    b: list[float] = []
    rounds = PAIRED_WARMUP_ROUNDS + samples
    with counted(f"{label} ({PAIRED_WARMUP_ROUNDS} warm-up)", rounds, unit="pairs") as bar:
        for index in range(rounds):
            time.sleep(SETTLE_S)
            x = first(index)
            time.sleep(SETTLE_S)
            y = second(index)
            if index >= PAIRED_WARMUP_ROUNDS:
                a.append(x)
                b.append(y)
            bar.advance()
    return a, b


def percentile(values: Iterable[float], q: float) -> float:
    """The ``q``-th percentile (0-100) of ``values``, linearly interpolated between the
    two nearest samples (numpy's default method); every benchmark's pNN comes from here.

    Raises ``ValueError`` when there are no values.
    """
    samples = np.fromiter(values, dtype=float)
    if samples.size == 0:
        raise ValueError("a percentile of no values")
    return float(np.percentile(samples, q))


def median(values: Iterable[float]) -> float:
    """The 50th :func:`percentile`."""
    return percentile(values, 50)


def rounded(value: float) -> float:
    return round(value, 2)
