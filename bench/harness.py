"""What every benchmark needs: a direct engine, a queued worker, the same prompt for both,
and its progress on stderr (:func:`step` for what nobody counts, :func:`counted` for
requests; stdout keeps only the figures).
"""

from __future__ import annotations

import contextlib
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar, cast

from producer.client import Client
from producer.quality.blocks import worker_block
from producer.quality.cases import Case
from producer.quality.gate import counting_answers
from producer.quality.runner import VariantRun, run_cases
from schemas.jobs import JobResult
from schemas.progress import ProgressBar
from schemas.queues import Tier
from schemas.settings import Settings
from workers.cpu_pinning import ease_engine_core, kept_off_compute_cores
from workers.engine.base import EngineRequest, SamplingOptions
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


def answer_cases(
    settings: Settings,
    client: Client,
    tier: Tier,
    cases: Sequence[Case],
    *,
    what: str,
    max_tokens: int | None,
    concurrency: int,
) -> VariantRun:
    """``cases`` answered on ``tier`` by a warm worker (one started for the block and
    stopped after, if none serves it), counted on a bar named ``what``."""
    with (
        worker_block(settings, tier, say=_stderr_line),
        counted(what, len(cases), unit="cases") as bar,
    ):
        return run_cases(
            client,
            tier,
            cases,
            max_tokens=max_tokens,
            concurrency=concurrency,
            on_answer=counting_answers(bar),
        )


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


@dataclass
class Rig:
    """A worker process on a tier's model and a client talking to it."""

    settings: Settings
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
    settings: Settings,
    tier: Tier,
    *,
    concurrency: int | None = None,
    prefill_prompts: bool = True,
) -> Iterator[Rig]:
    """A worker on ``tier``'s model, as its own process, with ``concurrency`` slots
    (None: the tier's configured number, the worker as deployed), and a client.

    The job database is :func:`bench_database`'s. A bench whose requests name no
    system prompt passes ``prefill_prompts=False``: its worker starts without
    prefilling the registered prompts (the 2k-token one takes seconds on a CPU) and
    never re-prefills them in the middle of a measurement. Inside
    :func:`shared_starts`, a worker-only rig is left running for the next bench.
    """
    slots = settings.tier(tier).concurrency if concurrency is None else concurrency
    if not _sharing.on:
        release_held()
        with _start_rig(
            settings,
            tier,
            concurrency=slots,
            env=None if prefill_prompts else {"LLMQ_PREFILL_PROMPTS": "0"},
        ) as rig:
            yield rig
        return
    # A shared worker prefills once, so that it serves the benches that name a system
    # prompt too, and never refreshes: no re-prefill lands inside a measurement, and
    # requests that name no system prompt run on it as on an unprefilled worker.
    shared_env = {"LLMQ_PREFILL_INTERVAL_S": str(NEVER_S)}
    with _held(
        ("worker", settings, tier, slots),
        lambda: _start_rig(settings, tier, concurrency=slots, env=shared_env),
    ) as rig:
        yield rig


@contextlib.contextmanager
def engine_only(
    settings: Settings, tier: Tier, *, concurrency: int | None = None, fresh: bool = False
) -> Iterator[VllmEngine]:
    """The tier's engine in this process, with the worker's engine settings (and its
    ``concurrency``, the batch it runs at most, where given). Inside
    :func:`shared_starts` it is left running for the next bench that asks for the
    same engine, unless ``fresh`` (an engine that has served nothing yet)."""
    config = settings.tier(tier)
    if concurrency is not None:
        config = config.model_copy(update={"concurrency": concurrency})

    @contextlib.contextmanager
    def start() -> Iterator[VllmEngine]:
        with step(f"starting a {tier} engine in this process"):
            engine = VllmEngine.start(
                model_path=resolve_model(config.model, settings.bundled_model_dir),
                config=config,
            )
        try:
            # Where the worker keeps itself off the engine's compute cores and eases its
            # engine core's wait, so does the process that drives the engine directly:
            # both sides alike.
            with kept_off_compute_cores() if settings.pin_worker_cpus else contextlib.nullcontext():
                ease_engine_core(settings.engine_core_nice)
                yield engine
        finally:
            engine.shutdown()

    if fresh or not _sharing.on:
        release_held()  # one engine at a time
        with start() as engine:
            yield engine
        return
    with _held(("engine", settings, tier, config.concurrency), start) as engine:
        yield engine


# Long enough for any suite: a shared worker's prompts are prefilled once, at its start.
NEVER_S = 10 * 24 * 3600.0


@dataclass
class _Held:
    key: tuple[object, ...]
    thing: object
    stack: contextlib.ExitStack


@dataclass
class _Sharing:
    on: bool = False
    held: _Held | None = None


# Module state: a process runs one bench at a time, and at most one engine.
_sharing = _Sharing()

T = TypeVar("T")


@contextlib.contextmanager
def _held(
    key: tuple[object, ...], start: Callable[[], contextlib.AbstractContextManager[T]]
) -> Iterator[T]:
    """The held engine or worker if it is ``key``'s, else a new one (the old stopped
    first: one engine at a time), left running when the bench ends well."""
    if _sharing.held is None or _sharing.held.key != key:
        release_held()
        stack = contextlib.ExitStack()
        _sharing.held = _Held(key=key, thing=stack.enter_context(start()), stack=stack)
    try:
        yield cast(T, _sharing.held.thing)
    except BaseException:
        release_held()  # a bench that failed may leave it busy
        raise


@contextlib.contextmanager
def shared_starts() -> Iterator[None]:
    """While open, a bench asking for the same worker or in-process engine as the bench
    before it (tier, slots) reuses it instead of starting its own; anything else that
    starts an engine stops the held one first (one engine at a time). Engine starts
    are most of a quick report's run on a small CPU host."""
    _sharing.on = True
    try:
        yield
    finally:
        _sharing.on = False
        release_held()


def release_held() -> None:
    """Stop the worker or engine :func:`shared_starts` holds, if any."""
    held, _sharing.held = _sharing.held, None
    if held is not None:
        held.stack.close()


@contextlib.contextmanager
def _start_rig(
    settings: Settings, tier: Tier, *, concurrency: int, env: dict[str, str] | None
) -> Iterator[Rig]:
    """A fresh rig: a worker process (its environment plus ``env``) and a client."""
    with (
        bench_database(settings) as ready,
        tempfile.TemporaryDirectory(prefix="llmq-bench-") as scratch,
    ):
        log = (Path(scratch) / "worker.log").open("wb")
        worker = start_worker_process(ready, tier, concurrency=concurrency, output=log, env=env)
        try:
            with step(f"starting a {tier} worker"):
                wait_until_warm(ready, tier, worker)
            with Client(ready) as client:
                yield Rig(settings=ready, client=client, tier=tier)
        finally:
            stop_process(worker)
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


def direct_options(max_tokens: int) -> SamplingOptions:
    return SamplingOptions(max_tokens=max_tokens, temperature=0.0)


def engine_ttft_ms(
    engine: VllmEngine,
    request_id: str,
    max_tokens: int,
    messages: list[dict[str, str]] | None = None,
) -> float:
    """Time to first text from calling ``engine`` directly (prompt rendering included)."""
    started = time.perf_counter()
    prompt = engine.render_chat(messages or [{"role": "user", "content": BENCH_PROMPT}])
    ttft: float | None = None
    # Run each request to its end, as the queued path does, so both start idle.
    for delta in engine.stream(EngineRequest(prompt, direct_options(max_tokens), request_id)):
        if delta.text and ttft is None:
            ttft = (time.perf_counter() - started) * 1000.0
    if ttft is None:
        raise RuntimeError("the engine produced no text")
    return ttft


@dataclass(frozen=True)
class StreamTiming:
    """One streamed answer as its reader saw it: first text, last text, pieces of text,
    and the tokens they held (as the server counted them)."""

    ttft_ms: float
    total_ms: float
    chunks: int
    tokens: int
    engine_ttft_ms: float | None = None
    """Through llmq: the worker's own measure of the engine's part of ``ttft_ms``
    (``schemas.events.Timings.engine_ttft_ms``)."""

    @property
    def queue_path_ms(self) -> float | None:
        """What the queue path put on the way to the first text (None: not through llmq)."""
        if self.engine_ttft_ms is None:
            return None
        return self.ttft_ms - self.engine_ttft_ms

    @property
    def itl_ms(self) -> float | None:
        """Mean time per token after the first (inter-token latency).

        Per token, not per piece: a server that sends two tokens in one piece when its
        reader falls behind has not made the second token any slower.
        """
        if self.tokens < 2:
            return None
        return (self.total_ms - self.ttft_ms) / (self.tokens - 1)


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

    def timing(
        self, tokens: int | None = None, *, engine_ttft_ms: float | None = None
    ) -> StreamTiming:
        """The stream's timing; ``tokens``: completion tokens as the server counted
        them (None: one per piece, for a server that does not say)."""
        if self.first is None:
            raise RuntimeError("no text was streamed")
        to_ms = 1000.0
        return StreamTiming(
            (self.first - self.started) * to_ms,
            (self.last - self.started) * to_ms,
            self.chunks,
            self.chunks if tokens is None else tokens,
            engine_ttft_ms,
        )


def direct_timing(engine: VllmEngine, request_id: str, max_tokens: int) -> StreamTiming:
    """A request straight into an engine in this process (prompt rendering included)."""
    clock = StreamClock()
    prompt = engine.render_chat([{"role": "user", "content": BENCH_PROMPT}])
    tokens = 0
    for delta in engine.stream(EngineRequest(prompt, direct_options(max_tokens), request_id)):
        if delta.text:
            clock.text()
        tokens = delta.completion_tokens
    return clock.timing(tokens)


def queued_timing(rig: Rig, max_tokens: int) -> StreamTiming:
    """The same request through submit → Redis → worker → pub/sub → client."""
    clock = StreamClock()
    handle = rig.client.submit(request_fields(max_tokens), tier=rig.tier, subscribe=True)
    for _chunk in handle.stream(timeout=300):
        clock.text()
    result = handle.result(timeout=300)
    return clock.timing(
        result.usage.completion_tokens, engine_ttft_ms=result.timings.engine_ttft_ms
    )


def queued_ttft_ms(rig: Rig, max_tokens: int, request: dict[str, object] | None = None) -> float:
    """Time to first text through submit → Redis → worker → pub/sub → client."""
    return queued_sample(rig, request or request_fields(max_tokens))[0]


def queued_sample(
    rig: Rig, request: dict[str, object], *, idempotency_key: str | None = None
) -> tuple[float, JobResult]:
    """TTFT through the whole queue path, and the job's result (drained before returning)."""
    started = time.perf_counter()
    # Read at once, as the gateway reads: subscribed before the job is written.
    handle = rig.client.submit(
        request, tier=rig.tier, subscribe=True, idempotency_key=idempotency_key
    )
    for _chunk in handle.stream(timeout=300):
        ttft = (time.perf_counter() - started) * 1000.0
        # Drain, so the next sample starts on an idle engine.
        return ttft, handle.result(timeout=300)
    raise RuntimeError("the job produced no text")


def in_block_order(sides: Sequence[T], block: int) -> list[T]:
    """The order in which ``sides`` run in block ``block`` (from 0): as given, then
    reversed, and so on (A B, B A, A B...). A host whose speed drifts one way through
    a run then favours neither side, as it would the side that always goes second."""
    return list(sides) if block % 2 == 0 else list(reversed(sides))


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
    alternate: bool = False,
) -> tuple[list[float], list[float]]:
    """Alternate ``first`` and ``second`` (each given the round number), after warm-up rounds.

    Alternating pairs keeps a noisy machine's drift out of the comparison. With
    ``alternate``, odd rounds run ``second`` before ``first``, so neither side always
    follows the other's tail work.
    """
    a: list[float] = []
    b: list[float] = []
    rounds = PAIRED_WARMUP_ROUNDS + samples
    with counted(f"{label} ({PAIRED_WARMUP_ROUNDS} warm-up)", rounds, unit="pairs") as bar:
        for index in range(rounds):
            x, y = _pair(first, second, index, swapped=alternate and index % 2 == 1)
            if index >= PAIRED_WARMUP_ROUNDS:
                a.append(x)
                b.append(y)
            bar.advance()
    return a, b


def _pair(
    first: Callable[[int], float], second: Callable[[int], float], index: int, *, swapped: bool
) -> tuple[float, float]:
    """One round: both samples, each after a settle; ``second`` first when ``swapped``."""
    if swapped:
        time.sleep(SETTLE_S)
        y = second(index)
        time.sleep(SETTLE_S)
        return first(index), y
    time.sleep(SETTLE_S)
    x = first(index)
    time.sleep(SETTLE_S)
    return x, second(index)


def rounded(value: float) -> float:
    return round(value, 2)
