"""``llmq bench mixed``: vLLM's own server and llmq on the same realistic mixed workload.

One seeded trace (:mod:`bench.trace`: support chats with a long system prompt, easy to
hard questions, quality cases, and a batch flood from part-way through) is replayed
open loop, with the ``openai`` SDK and streaming, against each side in turn (never two
engines at once):

* **vllm**: ``python -m vllm.entrypoints.openai.api_server`` with the engine settings
  of the largest tier, every request sent to it as it is; batch requests are plain
  requests, since a plain server has no priorities.
* **llmq**: a private Redis and SQLite, one warm worker and ``llmq gateway``;
  interactive requests ask for ``model: "auto"`` (with the registered system prompt by
  name), the flood for ``priority: "batch"``. One worker serves one tier, and this
  bench starts one worker: its gateway runs without a trained router, so ``auto``
  lands on the default tier, the tier that worker serves. The report names the tiers
  served.

Per side: interactive TTFT p50/p95/p99 and end-to-end p50/p95, batch requests
completed and their tokens/s during the flood, quality on the requests carrying a
scoring case (the A/B gate's scorer), cost in engine-seconds and failed requests.
"""

from __future__ import annotations

import contextlib
import os
import platform
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from bench.harness import percentile, rounded, step
from bench.redis_server import RedisServer, free_port
from bench.trace import Event, TracePlan, build_trace, describe
from schemas.prompt_registry import PromptRegistry
from schemas.queues import Tier
from schemas.settings import Settings

REQUEST_TIMEOUT_S = 300.0
START_TIMEOUT_S = 900.0
MAX_IN_FLIGHT = 512
"""Dispatcher threads: an open loop must never wait for a free thread."""
CUT_GRACE_S = 30.0
"""How long cut batch requests may take to notice before they are abandoned."""

COST_MEASURE = (
    "engine-seconds: seconds with at least one request of the side in flight (seen "
    "from the client), times the serving tier's cost_weight"
)


@dataclass
class Outcome:
    """What one request of the trace got, in seconds from the replay's start."""

    index: int
    kind: str
    sent: float
    finished: float | None = None
    ttft_ms: float | None = None
    e2e_ms: float | None = None
    tokens: int = 0
    text: str = ""
    ok: bool = False
    cut: bool = False
    error: str | None = None


@dataclass(frozen=True)
class Target:
    """How one side is called: where, as which model, and what each request adds."""

    base_url: str
    api_key: str
    interactive_model: str
    batch_model: str
    # Registered prompts by reference -> text, for a side that needs the text sent.
    inline_prompts: dict[str, str] | None
    batch_extra: dict[str, Any] = field(default_factory=dict)


def request_arguments(target: Target, event: Event) -> dict[str, Any]:
    """The ``chat.completions.create`` keywords of ``event`` for ``target``."""
    messages = [dict(m) for m in event.messages]
    extra: dict[str, Any] = {}
    if event.system_prompt is not None:
        if target.inline_prompts is not None:
            text = target.inline_prompts[event.system_prompt]
            messages.insert(0, {"role": "system", "content": text})
        else:
            extra["system_prompt"] = event.system_prompt
    if event.kind == "batch":
        extra.update(target.batch_extra)
    arguments: dict[str, Any] = {
        "model": target.batch_model if event.kind == "batch" else target.interactive_model,
        "messages": messages,
        "max_tokens": event.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if extra:
        arguments["extra_body"] = extra
    return arguments


class Replay:
    """Fires each event of a trace at its time (open loop) and records what came back.

    Batch requests still running when the trace ends are cut: their connections are
    shut, so the server may abort them, and only batch work finished inside the trace
    counts. Interactive requests are waited for, up to the per-request timeout.
    """

    def __init__(self, sdk: Any, target: Target, events: Sequence[Event]) -> None:
        self.sdk = sdk
        self.target = target
        self.events = list(events)
        self.outcomes: list[Outcome] = []
        self._lock = threading.Lock()
        self._running: dict[int, Outcome] = {}
        self._done: dict[int, Outcome] = {}
        self._open_batch: dict[int, Any] = {}
        self._cut_at: float | None = None
        self._start = 0.0

    def now(self) -> float:
        return time.perf_counter() - self._start

    def run(
        self,
        duration_s: float,
        *,
        at: Callable[[float], None] | None = None,
        on_cut: Callable[[], None] | None = None,
    ) -> None:
        """Replay; ``at(t)`` is called once, from its own thread, at half-time, and
        ``on_cut()`` when the trace ends, after the open batch streams are shut."""
        self._start = time.perf_counter()
        extra: threading.Thread | None = None
        if at is not None:
            extra = threading.Thread(target=self._at_half, args=(at, duration_s), daemon=True)
            extra.start()
        pool = ThreadPoolExecutor(max_workers=MAX_IN_FLIGHT, thread_name_prefix="replay")
        try:
            futures = self._dispatch(pool, duration_s)
            self._cut_batch()
            if on_cut is not None:
                on_cut()
            _drain(futures)
            if extra is not None:
                extra.join()
        finally:
            # A request still blocked after the grace is abandoned, not waited for.
            pool.shutdown(wait=False, cancel_futures=True)
        self._settle()

    def _dispatch(
        self, pool: ThreadPoolExecutor, duration_s: float
    ) -> list[tuple[Event, Future[None]]]:
        futures = []
        for index, event in enumerate(self.events):
            delay = event.t - self.now()
            if delay > 0:
                time.sleep(delay)
            futures.append((event, pool.submit(self._one, index, event)))
        delay = duration_s - self.now()
        if delay > 0:
            time.sleep(delay)
        return futures

    def _settle(self) -> None:
        with self._lock:
            for index, outcome in self._running.items():
                outcome.finished = self._cut_at
                if outcome.kind == "batch":
                    outcome.cut = True
                else:
                    outcome.error = "unfinished"
                self._done[index] = outcome
            self._running.clear()
            self.outcomes = [self._done[index] for index in sorted(self._done)]

    def _at_half(self, action: Callable[[float], None], duration_s: float) -> None:
        time.sleep(max(0.0, duration_s / 2 - self.now()))
        action(self.now())

    def _cut_batch(self) -> None:
        with self._lock:
            self._cut_at = self.now()
            streams = list(self._open_batch.values())
        for stream in streams:
            abort_stream(stream)

    def _one(self, index: int, event: Event) -> None:
        outcome = Outcome(index=index, kind=event.kind, sent=self.now())
        with self._lock:
            if event.kind == "batch" and self._cut_at is not None:
                outcome.cut = True
                outcome.finished = outcome.sent
                self._done[index] = outcome
                return
            self._running[index] = outcome
        started = time.perf_counter()
        read = _Read()
        try:
            self._read(index, event, read, started)
        except Exception as exc:  # noqa: BLE001 - any failure of a request is counted
            status = getattr(exc, "status_code", None)
            kind = type(exc).__name__ + (f" {status}" if status is not None else "")
            read.error = f"{kind}: {exc}"[:300]
        e2e_ms = (time.perf_counter() - started) * 1000.0
        with self._lock:
            self._open_batch.pop(index, None)
            if self._running.pop(index, None) is None:
                return  # already recorded as cut or unfinished
            outcome.finished = self.now()
            outcome.text = "".join(read.pieces)
            outcome.ttft_ms = read.ttft_ms
            if event.kind == "batch" and self._cut_at is not None:
                outcome.cut = True  # ended after the trace: not the trace's work
            elif read.error is None:
                outcome.ok = True
                outcome.e2e_ms = e2e_ms
                outcome.tokens = read.usage_tokens or len(read.pieces)
            else:
                outcome.error = read.error
            self._done[index] = outcome

    def _read(self, index: int, event: Event, read: _Read, started: float) -> None:
        stream = self.sdk.chat.completions.create(**request_arguments(self.target, event))
        if event.kind == "batch":
            with self._lock:
                self._open_batch[index] = stream
                cut = self._cut_at is not None
            if cut:
                abort_stream(stream)
        for chunk in stream:
            if chunk.usage is not None:
                read.usage_tokens = chunk.usage.completion_tokens
            if chunk.choices and chunk.choices[0].delta.content:
                if read.ttft_ms is None:
                    read.ttft_ms = (time.perf_counter() - started) * 1000.0
                read.pieces.append(chunk.choices[0].delta.content)
        if read.ttft_ms is None:
            read.error = "no text"


@dataclass
class _Read:
    pieces: list[str] = field(default_factory=list)
    ttft_ms: float | None = None
    usage_tokens: int | None = None
    error: str | None = None


def _drain(futures: list[tuple[Event, Future[None]]]) -> None:
    # Interactive requests run to their end; cut batch requests get a grace.
    for event, future in futures:
        if event.kind == "interactive":
            future.result()
    deadline = time.monotonic() + CUT_GRACE_S
    for event, future in futures:
        if event.kind == "batch":
            with contextlib.suppress(Exception):
                future.result(timeout=max(0.0, deadline - time.monotonic()))


def abort_stream(stream: Any) -> None:
    """Shut an SDK stream's connection from another thread (a blocked read returns).

    Closing alone does not wake a thread blocked reading the socket, and the server
    would not see the client leave; shutting the socket down does both.
    """
    import socket

    with contextlib.suppress(Exception):
        network = stream.response.extensions["network_stream"]
        network.get_extra_info("socket").shutdown(socket.SHUT_RDWR)
    with contextlib.suppress(Exception):
        stream.close()


# --- the report's arithmetic -------------------------------------------------------


def busy_seconds(intervals: Sequence[tuple[float, float]]) -> float:
    """Length of the union of ``[start, end]`` intervals."""
    total = 0.0
    current_start: float | None = None
    current_end = 0.0
    for start, end in sorted(intervals):
        if current_start is None or start > current_end:
            if current_start is not None:
                total += current_end - current_start
            current_start, current_end = start, end
        else:
            current_end = max(current_end, end)
    if current_start is not None:
        total += current_end - current_start
    return total


@dataclass(frozen=True)
class SideFigures:
    """One side's figures, before they get the side's prefix."""

    ttft_p50_ms: float | None
    ttft_p95_ms: float | None
    ttft_p99_ms: float | None
    e2e_p50_ms: float | None
    e2e_p95_ms: float | None
    interactive_ok: int
    batch_completed: int
    batch_cut: int
    batch_tok_s: float
    failed: int
    cost: float


def side_figures(
    outcomes: Sequence[Outcome],
    *,
    flood_s: float,
    cost_weight: float,
) -> SideFigures:
    """Percentiles, batch goodput and cost of one side's outcomes.

    ``batch_tok_s``: completion tokens of batch requests that finished inside the
    trace, over the flood's length. A cut batch request (still running when the trace
    ended) is neither completed nor failed. Every other request that did not end with
    text is failed.
    """
    interactive = [o for o in outcomes if o.kind == "interactive" and o.ok]
    batch_done = [o for o in outcomes if o.kind == "batch" and o.ok]
    ttft = [o.ttft_ms for o in interactive if o.ttft_ms is not None]
    e2e = [o.e2e_ms for o in interactive if o.e2e_ms is not None]
    intervals = [(o.sent, o.finished) for o in outcomes if o.finished is not None]
    return SideFigures(
        ttft_p50_ms=_pct(ttft, 50),
        ttft_p95_ms=_pct(ttft, 95),
        ttft_p99_ms=_pct(ttft, 99),
        e2e_p50_ms=_pct(e2e, 50),
        e2e_p95_ms=_pct(e2e, 95),
        interactive_ok=len(interactive),
        batch_completed=len(batch_done),
        batch_cut=sum(o.cut for o in outcomes),
        batch_tok_s=rounded(sum(o.tokens for o in batch_done) / flood_s) if flood_s > 0 else 0.0,
        failed=sum(not o.ok and not o.cut for o in outcomes),
        cost=rounded(busy_seconds(intervals) * cost_weight),
    )


def _pct(values: list[float], q: float) -> float | None:
    return rounded(percentile(values, q)) if values else None


def quality_percent(scores: Sequence[bool | float]) -> float | None:
    """Mean score in percent points (a failed request scores 0); None without cases."""
    if not scores:
        return None
    return rounded(100.0 * sum(float(s) for s in scores) / len(scores))


def combine(
    vllm: SideFigures,
    llmq: SideFigures,
    *,
    vllm_quality: float | None,
    llmq_quality: float | None,
) -> dict[str, Any]:
    """The issue's figures, then the rest of both sides' figures."""

    def speedup(theirs: float | None, ours: float | None) -> float | None:
        return round(theirs / ours, 2) if theirs is not None and ours else None

    figures: dict[str, Any] = {
        "vllm_interactive_ttft_p99_ms": vllm.ttft_p99_ms,
        "llmq_interactive_ttft_p99_ms": llmq.ttft_p99_ms,
        "p99_speedup": speedup(vllm.ttft_p99_ms, llmq.ttft_p99_ms),
        "vllm_interactive_ttft_p50_ms": vllm.ttft_p50_ms,
        "llmq_interactive_ttft_p50_ms": llmq.ttft_p50_ms,
        "vllm_batch_tok_s": vllm.batch_tok_s,
        "llmq_batch_tok_s": llmq.batch_tok_s,
        "vllm_quality": vllm_quality,
        "llmq_quality": llmq_quality,
        "vllm_cost": vllm.cost,
        "llmq_cost": llmq.cost,
        "vllm_failed": vllm.failed,
        "llmq_failed": llmq.failed,
    }
    for name, side in (("vllm", vllm), ("llmq", llmq)):
        figures[f"{name}_interactive_ttft_p95_ms"] = side.ttft_p95_ms
        figures[f"{name}_interactive_e2e_p50_ms"] = side.e2e_p50_ms
        figures[f"{name}_interactive_e2e_p95_ms"] = side.e2e_p95_ms
        figures[f"{name}_interactive_ok"] = side.interactive_ok
        figures[f"{name}_batch_completed"] = side.batch_completed
        figures[f"{name}_batch_cut_at_end"] = side.batch_cut
    figures["p50_speedup"] = speedup(vllm.ttft_p50_ms, llmq.ttft_p50_ms)
    figures["batch_tok_s_ratio"] = (
        round(llmq.batch_tok_s / vllm.batch_tok_s, 3) if vllm.batch_tok_s else None
    )
    return figures


# --- the sides -----------------------------------------------------------------------


class Side:
    """A running server to replay against; ``restart`` kills and restarts its engine."""

    name: str
    target: Target
    tier: Tier
    tiers_served: list[str]

    def start(self) -> None:
        """Start the server; returns once it serves."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop everything :meth:`start` started."""
        raise NotImplementedError

    def restart(self) -> float:
        """Kill the engine's process and start it again; seconds until it serves again."""
        raise NotImplementedError

    def cut_batch(self) -> None:
        """Drop batch work still waiting or running when the trace ends.

        A plain server aborts a request whose client left; that is the default.
        """


class VllmSide(Side):
    """vLLM's own OpenAI server on a fixed port (a restart comes back on the same one)."""

    name = "vllm"

    def __init__(self, settings: Settings, tier: Tier, scratch: Path) -> None:
        from bench.peer import vllm_flags
        from workers.engine.vllm import engine_arguments
        from workers.models import resolve_model

        config = settings.tier(tier)
        model_path = resolve_model(config.model, settings.bundled_model_dir)
        self.tier = tier
        self.tiers_served = [tier.value]
        self.port = free_port()
        self.model = Path(str(model_path)).name
        self.log = scratch / "vllm.log"
        self.command = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--port",
            str(self.port),
            "--host",
            "127.0.0.1",
            "--served-model-name",
            self.model,
            "--disable-uvicorn-access-log",
            *vllm_flags(engine_arguments(str(model_path), config)),
        ]
        registry = PromptRegistry.load(settings.prompts_dir)
        self.target = Target(
            base_url=f"http://127.0.0.1:{self.port}",
            api_key="none",
            interactive_model=self.model,
            batch_model=self.model,
            inline_prompts=_prompt_texts(registry),
        )
        self.process: Any = None
        # A restart runs in its own thread: once stopped for good, nothing starts again.
        self._guard = threading.Lock()
        self._closed = False

    def start(self) -> None:
        import subprocess

        from bench.peer import _wait_for

        with self._guard, self.log.open("ab") as log:
            if self._closed:
                raise RuntimeError("vLLM's server was stopped")
            process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            self.process = process
        _wait_for(self.target.base_url + "/v1/models", process)

    def stop(self, *, kill: bool = False) -> None:
        import signal

        from bench.peer import _stop_group

        with self._guard:
            process, self.process = self.process, None
            self._closed = self._closed or not kill
        if process is None:
            return
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        else:
            _stop_group(process)

    def restart(self) -> float:
        started = time.perf_counter()
        self.stop(kill=True)
        self.start()
        return time.perf_counter() - started


class LlmqSide(Side):
    """A private Redis, SQLite job database, one warm worker and ``llmq gateway``."""

    name = "llmq"

    def __init__(self, settings: Settings, scratch: Path, tier: Tier) -> None:
        self.tier = tier
        self.tiers_served = [self.tier.value]
        self.scratch = scratch
        self.redis = RedisServer(scratch)
        self.redis.start()
        self.settings = settings.model_copy(
            update={
                "broker_url": self.redis.url,
                "database_url": f"sqlite:///{scratch / 'mixed.db'}",
            }
        )
        # No trained router here: one worker serves one tier, so ``auto`` must land on it.
        router_dir = scratch / "no-router"
        router_dir.mkdir()
        self.env = {
            "LLMQ_ROUTER_DIR": str(router_dir),
            "LLMQ_DEFAULT_TIER": tier.value,
            # One API key sends the whole flood: its per-key caps would refuse it.
            "LLMQ_KEY_MAX_OPEN_STREAMS": "100000",
            "LLMQ_KEY_MAX_ACTIVE_JOBS": "100000",
        }
        self.worker: Any = None
        self.gateway: Any = None
        # A restart runs in its own thread: once stopped for good, nothing starts again.
        self._guard = threading.Lock()
        self._closed = False
        self.target = Target(
            base_url="",
            api_key="",
            interactive_model="auto",
            batch_model="auto",
            inline_prompts=None,
            batch_extra={"priority": "batch"},
        )

    def start(self) -> None:
        import migrations
        from producer.gateway.keys import create_key
        from schemas.db import make_engine, make_sessions

        migrations.upgrade(self.settings.database_url)
        self._start_worker()
        db = make_engine(self.settings.database_url)
        secret = create_key(make_sessions(db), "mixed-bench", rate_limit_per_min=10_000_000)[1]
        db.dispose()
        port = free_port()
        self.gateway = _start_gateway(self.settings, port, self.env, self.scratch)
        self.target = Target(
            base_url=f"http://127.0.0.1:{port}",
            api_key=secret,
            interactive_model="auto",
            batch_model="auto",
            inline_prompts=None,
            batch_extra={"priority": "batch"},
        )

    def _start_worker(self) -> None:
        from workers.supervise import start_worker_process, wait_until_warm

        with self._guard, (self.scratch / "worker.log").open("ab") as log:
            if self._closed:
                raise RuntimeError("the llmq stack was stopped")
            worker = start_worker_process(
                self.settings, self.tier, output=log, env=self.env, own_group=True
            )
            self.worker = worker
        wait_until_warm(self.settings, self.tier, worker, timeout=START_TIMEOUT_S)

    def restart(self) -> float:
        from workers.supervise import kill_group

        started = time.perf_counter()
        with self._guard:
            worker, self.worker = self.worker, None
        if worker is not None:
            kill_group(worker)
        self._start_worker()
        return time.perf_counter() - started

    def cut_batch(self) -> None:
        # The gateway does not cancel a job whose stream was closed (a reader may come
        # back): the bulk job's owner cancels what is left, as vLLM's clients left.
        from sqlalchemy import select

        from producer.client import Client
        from schemas.jobs import JobStatus
        from schemas.queues import Priority
        from schemas.tables import Job

        open_statuses = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
        with Client(self.settings, warm=False) as client:
            with client.sessions() as session:
                ids = session.scalars(
                    select(Job.id).where(
                        Job.priority == Priority.BATCH.value, Job.status.in_(open_statuses)
                    )
                ).all()
            for job_id in ids:
                with contextlib.suppress(Exception):
                    client.cancel(job_id)

    def stop(self) -> None:
        from workers.supervise import stop_process

        with self._guard:
            self._closed = True
            worker, self.worker = self.worker, None
        if self.gateway is not None:
            stop_process(self.gateway, grace_s=10)
        if worker is not None:
            stop_process(worker)
        self.redis.stop()


def _start_gateway(settings: Settings, port: int, env: dict[str, str], scratch: Path) -> Any:
    import subprocess

    import httpx

    variables = {
        **os.environ,
        "LLMQ_BROKER_URL": settings.broker_url,
        "LLMQ_DATABASE_URL": settings.database_url,
        **env,
    }
    command = [sys.executable, "-m", "producer.cli", "gateway", "--port", str(port)]
    with (scratch / "gateway.log").open("ab") as log:
        process = subprocess.Popen(command, env=variables, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError("the gateway did not start")
        time.sleep(0.2)


def _prompt_texts(registry: PromptRegistry) -> dict[str, str]:
    from bench.trace import SUMMARY_PROMPT, SUPPORT_PROMPT

    return {ref: registry.resolve(ref).text for ref in (SUPPORT_PROMPT, SUMMARY_PROMPT)}


@contextlib.contextmanager
def _running(side: Side, *, label: str) -> Iterator[Side]:
    try:
        with step(f"{label}: starting"):
            side.start()
        yield side
    finally:
        side.stop()


# --- the benchmark -------------------------------------------------------------------


@dataclass
class SideRun:
    """One side's replay and what happened around it."""

    outcomes: list[Outcome]
    restart_s: float | None = None
    restart_at_s: float | None = None
    restart_error: str | None = None


def replay_side(
    side: Side, events: Sequence[Event], plan: TracePlan, *, with_restart: bool
) -> SideRun:
    """Replay ``events`` against a started ``side`` with the openai SDK."""
    import openai  # the test extra; a user's own client

    sdk = openai.OpenAI(
        base_url=side.target.base_url + "/v1",
        api_key=side.target.api_key,
        timeout=REQUEST_TIMEOUT_S,
        max_retries=2,  # the SDK's default: a user's client retries too
    )
    _warm_up(sdk, side.target)
    run = SideRun(outcomes=[])

    def restart(t: float) -> None:
        run.restart_at_s = round(t, 1)
        try:
            run.restart_s = round(side.restart(), 1)
        except Exception as exc:  # noqa: BLE001 - reported in the figures, not raised
            run.restart_error = f"{type(exc).__name__}: {exc}"[:300]

    replay = Replay(sdk, side.target, events)
    replay.run(plan.duration_s, at=restart if with_restart else None, on_cut=side.cut_batch)
    run.outcomes = replay.outcomes
    return run


def _warm_up(sdk: Any, target: Target) -> None:
    # The same short requests on both sides before the clock starts (prefix caches
    # included: the first support turn is not anyone's cold start).
    from bench.trace import SUPPORT_PROMPT

    warm = Event(
        t=0.0,
        kind="interactive",
        messages=({"role": "user", "content": "Hello"},),
        max_tokens=8,
        system_prompt=SUPPORT_PROMPT,
    )
    for _ in range(2):
        stream = sdk.chat.completions.create(**request_arguments(target, warm))
        for _chunk in stream:
            pass


def score_quality(
    events: Sequence[Event], outcomes: Sequence[Outcome]
) -> tuple[float | None, int, str | None]:
    """Quality in percent on the events with a case, the cases scored, and why not."""
    from producer.quality.cases import load_cases
    from producer.quality.scoring import score
    from schemas.errors import ConfigError

    cases = {case.id: case for case in load_cases()}
    scores: list[bool | float] = []
    try:
        for outcome in outcomes:
            case_id = events[outcome.index].case
            if case_id is None:
                continue
            scores.append(score(cases[case_id], outcome.text) if outcome.ok else False)
    except ConfigError as exc:
        return None, 0, str(exc)
    return quality_percent(scores), len(scores), None


def run_mixed(
    settings: Settings,
    *,
    minutes: float,
    seed: int,
    with_restart: bool,
    interactive_rate: float,
    batch_rate: float,
    vllm_tier: Tier | None = None,
    llmq_tier: Tier | None = None,
) -> dict[str, Any]:
    """Replay one seeded trace against vLLM's server, then against llmq; the figures.

    vLLM's server runs ``vllm_tier``'s engine (default: the largest tier, ``large``);
    llmq's one worker serves ``llmq_tier`` (default: the default tier), where ``auto``
    lands. Give both the same tier to compare the same model.
    """
    plan = TracePlan(
        minutes=minutes, seed=seed, interactive_rate=interactive_rate, batch_rate=batch_rate
    )
    events = build_trace(plan)
    runs: dict[str, SideRun] = {}
    sides: dict[str, Side] = {}
    with tempfile.TemporaryDirectory(prefix="llmq-mixed-") as folder:
        scratch = Path(folder)
        for name in ("vllm", "llmq"):
            (scratch / name).mkdir()
            side: Side = (
                VllmSide(settings, vllm_tier or Tier.LARGE, scratch / name)
                if name == "vllm"
                else LlmqSide(settings, scratch / name, llmq_tier or settings.default_tier)
            )
            with _running(side, label=f"{name} side ({side.tier} tier)"):
                replaying = (
                    f"{name} side: replaying {len(events)} requests over {plan.minutes:g} min"
                )
                with step(replaying):
                    runs[name] = replay_side(side, events, plan, with_restart=with_restart)
            sides[name] = side
    return report(settings, plan, events, runs, sides, with_restart=with_restart)


def report(
    settings: Settings,
    plan: TracePlan,
    events: Sequence[Event],
    runs: dict[str, SideRun],
    sides: dict[str, Side],
    *,
    with_restart: bool,
) -> dict[str, Any]:
    """The figures of both sides' runs (quality scored here, after both engines stopped)."""
    flood_s = plan.duration_s - plan.flood_start_s
    figures: dict[str, SideFigures] = {}
    quality: dict[str, float | None] = {}
    scored: dict[str, int] = {}
    why: str | None = None
    for name, run in runs.items():
        weight = settings.tier(sides[name].tier).cost_weight
        figures[name] = side_figures(run.outcomes, flood_s=flood_s, cost_weight=weight)
        quality[name], scored[name], reason = score_quality(events, run.outcomes)
        why = why or reason
    result: dict[str, Any] = {"bench": "mixed"}
    result |= combine(
        figures["vllm"],
        figures["llmq"],
        vllm_quality=quality["vllm"],
        llmq_quality=quality["llmq"],
    )
    result["quality_measure"] = "percent of the trace's scoring cases answered right"
    result["quality_cases_scored"] = scored["vllm"]
    if why is not None:
        result["quality_null_reason"] = why
    result["cost_measure"] = COST_MEASURE
    result |= describe(list(events), plan)
    result["with_restart"] = with_restart
    for name, run in runs.items():
        result[f"{name}_restart_at_s"] = run.restart_at_s
        result[f"{name}_restart_took_s"] = run.restart_s
        if run.restart_error is not None:
            result[f"{name}_restart_error"] = run.restart_error
        # Failures by kind (exception and HTTP status), with the requests' kind.
        errors = Counter(f"{o.kind}: {o.error.split(':')[0]}" for o in run.outcomes if o.error)
        result[f"{name}_errors"] = dict(sorted(errors.items()))
        # Every interactive TTFT in trace order, for the report's distribution plots.
        result[f"{name}_interactive_ttft_samples_ms"] = [
            rounded(o.ttft_ms)
            for o in run.outcomes
            if o.kind == "interactive" and o.ok and o.ttft_ms is not None
        ]
    result["vllm_tier_config"] = sides["vllm"].tier.value
    result["vllm_model"] = settings.tier(sides["vllm"].tier).model
    result["llmq_tiers_served"] = sides["llmq"].tiers_served
    result["llmq_models_served"] = sorted(
        {settings.tier(Tier(t)).model for t in sides["llmq"].tiers_served}
    )
    result["llmq_auto_routing"] = (
        "auto -> the served tier: the bench stack runs one worker (one engine at a time "
        "on this host), and its gateway no trained router, with that tier as the default"
    )
    result["models"] = sorted({settings.tier(t).model for t in Tier})
    result["host"] = host_description()
    return result


def host_description() -> str:
    """CPU (or GPU), cores and OS, in one line."""
    cpu = platform.processor() or platform.machine() or "unknown CPU"
    with contextlib.suppress(OSError):
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    return f"{cpu}, {os.cpu_count()} cores, {platform.system()} {platform.release()}"
