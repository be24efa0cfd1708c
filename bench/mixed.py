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

Per side (:mod:`bench.mixed_report`): interactive TTFT p50/p95/p99 and end-to-end
p50/p95, batch requests completed and their tokens/s during the flood, quality on the
requests carrying a scoring case (the A/B gate's scorer), cost in engine-seconds and
failed requests.
"""

from __future__ import annotations

import contextlib
import tempfile
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from concurrent.futures import Future, ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from functools import partial
from pathlib import Path
from typing import Any

from bench.goodput import (
    Outcome,
)
from bench.harness import step
from bench.mixed_report import SideRun, report
from bench.mixed_sides import (
    DEFAULT_FLOOD_CAP,
    VLLM_MODES,
    LlmqSide,
    Side,
    VllmSide,
)
from bench.mixed_target import Target, request_arguments
from bench.trace import Event, TracePlan, build_trace
from schemas.queues import Tier
from schemas.settings import Settings

SIDES = ("vllm_fcfs", "vllm_priority", "vllm_capped", "llmq")

REQUEST_TIMEOUT_S = 300.0
MAX_IN_FLIGHT = 512
"""Dispatcher threads: an open loop must never wait for a free thread."""
CUT_GRACE_S = 30.0
"""How long cut batch requests may take to notice before they are abandoned."""


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
        cap = target.batch_cap
        self._batch_permits = threading.Semaphore(cap) if cap is not None else None

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
        permits = self._batch_permits if event.kind == "batch" else None
        if permits is None:
            self._request(index, event)
            return
        while not permits.acquire(timeout=0.2):  # the client's cap on batch in flight
            if self._cut_at is not None:
                break
        else:
            try:
                self._request(index, event)
            finally:
                permits.release()
            return
        with self._lock:  # still waiting for a permit when the trace ended
            self._done[index] = Outcome(
                index=index, kind=event.kind, sent=event.t, finished=self._cut_at, cut=True
            )

    def _request(self, index: int, event: Event) -> None:
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
        finish_reason = None
        for chunk in stream:
            if chunk.usage is not None:
                read.usage_tokens = chunk.usage.completion_tokens
            if chunk.choices and chunk.choices[0].finish_reason:
                finish_reason = chunk.choices[0].finish_reason
            if chunk.choices and chunk.choices[0].delta.content:
                if read.ttft_ms is None:
                    read.ttft_ms = (time.perf_counter() - started) * 1000.0
                read.pieces.append(chunk.choices[0].delta.content)
        if read.ttft_ms is None:
            # What the stream said of itself tells an empty answer from lost tokens.
            read.error = (
                f"no text (finish_reason {finish_reason}, {read.usage_tokens} completion tokens)"
            )


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


@contextlib.contextmanager
def _running(side: Side, *, label: str) -> Iterator[Side]:
    try:
        with step(f"{label}: starting"):
            side.start()
        yield side
    finally:
        side.stop()


# --- the benchmark -------------------------------------------------------------------


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
    cpu_before = side.cpu_seconds_by_process()
    replay.run(plan.duration_s, at=restart if with_restart else None, on_cut=side.cut_batch)
    # Read before the side stops (a restart's killed engine is not counted).
    cpu_after = side.cpu_seconds_by_process()
    run.share = side.share()
    run.cpu_s_by_process = {
        name: round(max(0.0, seconds - cpu_before.get(name, 0.0)), 1)
        for name, seconds in cpu_after.items()
    }
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


def make_side(name: str, settings: Settings, tier: Tier, scratch: Path, *, flood_cap: int) -> Side:
    """The side called ``name``: ``llmq`` or ``vllm_<mode>``."""
    if name == "llmq":
        return LlmqSide(settings, scratch, tier)
    mode = name.removeprefix("vllm_")
    if name == mode or mode not in VLLM_MODES:
        known = ", ".join(["llmq", *(f"vllm_{m}" for m in VLLM_MODES)])
        raise ValueError(f"unknown side {name!r}; use one of {known}")
    return VllmSide(settings, tier, scratch, mode=mode, flood_cap=flood_cap)


def side_order(sides: Sequence[str], blocks: int) -> list[str]:
    """The order the sides run in: forward, then backward, and so on (ABBA for two)."""
    order: list[str] = []
    for block in range(blocks):
        order += list(sides) if block % 2 == 0 else list(reversed(sides))
    return order


def run_mixed(
    settings: Settings,
    *,
    minutes: float,
    seed: int,
    with_restart: bool,
    interactive_rate: float,
    batch_rate: float,
    sides: Sequence[str] = SIDES,
    blocks: int = 1,
    flood_cap: int = DEFAULT_FLOOD_CAP,
    flood_rates: Sequence[float] = (),
    tier: Tier | None = None,
) -> dict[str, Any]:
    """Replay one seeded trace against each side in turn; the figures.

    Every side serves ``tier``'s model (default: the default tier, where ``auto`` lands
    on llmq's one worker). With ``blocks`` over 1, the sides run again in reverse
    order (ABBA), and each side's figures pool its blocks. ``flood_rates`` adds a sweep:
    the same trace at each batch rate, every side once, their attainment and goodput.
    """
    tier = tier or settings.default_tier
    if blocks < 1:
        raise ValueError("blocks must be at least 1")
    plan = TracePlan(
        minutes=minutes, seed=seed, interactive_rate=interactive_rate, batch_rate=batch_rate
    )
    run_at = partial(_run_plan, settings, sides=sides, flood_cap=flood_cap, tier=tier)
    result = run_at(plan, with_restart=with_restart, blocks=blocks)
    sweep = []
    for rate in flood_rates:
        at_rate = run_at(replace(plan, batch_rate=rate), with_restart=False, blocks=1)
        point: dict[str, Any] = {"flood_rate": rate}
        for name in sides:
            for key in ("slo_attainment", "batch_goodput_tok_s", "interactive_n", "failed"):
                point[f"{name}_{key}"] = at_rate[f"{name}_{key}"]
        sweep.append(point)
    if sweep:
        result["flood_rate_sweep"] = sweep
    return result


def _run_plan(
    settings: Settings,
    plan: TracePlan,
    *,
    with_restart: bool,
    sides: Sequence[str],
    blocks: int,
    flood_cap: int,
    tier: Tier,
) -> dict[str, Any]:
    events = build_trace(plan)
    runs: dict[str, list[SideRun]] = {name: [] for name in sides}
    made: dict[str, Side] = {}
    with tempfile.TemporaryDirectory(prefix="llmq-mixed-") as folder:
        for turn, name in enumerate(side_order(sides, blocks)):
            scratch = Path(folder) / f"{turn}-{name}"
            scratch.mkdir()
            side = make_side(name, settings, tier, scratch, flood_cap=flood_cap)
            with _running(side, label=f"{name} ({side.tier} tier)"):
                replaying = f"{name}: replaying {len(events)} requests over {plan.minutes:g} min"
                with step(replaying):
                    runs[name].append(replay_side(side, events, plan, with_restart=with_restart))
            made[name] = side
    return report(settings, plan, events, runs, made, with_restart=with_restart)
