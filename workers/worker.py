"""Starting a worker: pin the GPU, warm the engine, then (and only then) consume."""

from __future__ import annotations

import contextlib
import logging
import os
import secrets
import signal
import socket
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass

import redis

from schemas.boundary import broker_error, redact_url
from schemas.broker import redis_client
from schemas.db import make_engine, make_sessions
from schemas.prompt_registry import PromptCatalog
from schemas.queues import Priority, Tier, queue_name, tier_queues
from schemas.settings import Settings, TierConfig
from workers.app import LlmqCelery, make_app, start_on_receipt_of
from workers.append_combiner import AppendCombiner
from workers.background import BackgroundLoop
from workers.consume import consume, job_sender, reaper_thread
from workers.consumer_step import ConsumerDriver, install_driver
from workers.cpu_pinning import ease_engine_core, pin_off_compute_cores
from workers.deferred_writes import DeferredWrites
from workers.engine.vllm import VllmEngine
from workers.engine_watch import EngineWatch
from workers.metrics import WorkerMetrics
from workers.models import resolve_model
from workers.registry import EngineTiming, WorkerRegistration
from workers.running_jobs import CancelListener
from workers.scheduler import Scheduler, SlotShares, slot_shares, steered_share
from workers.scheduler_driver import SchedulerDriver
from workers.variants import check_engine_config, detect_device, served_config
from workers.warmup import KeepWarm, time_engine, warm_job_path, warm_up
from workers.worker_runtime import WorkerRuntime

log = logging.getLogger(__name__)

# Not a setting: an interpreter tuning of the worker process, not a wait.
# Tokens hop from the engine's loop thread to task threads; a shorter GIL switch
# interval than the default 5 ms keeps that hop off the time to first token.
GIL_SWITCH_INTERVAL_S = 0.0005


@dataclass(frozen=True)
class WorkerOptions:
    """How ``llmq worker`` was asked to run."""

    tier: Tier
    gpu: str | None = None
    concurrency: int | None = None
    loglevel: str = "INFO"
    metrics_port: int | None = None
    on_phase: Callable[[str], None] | None = None
    """Hears each start-up phase (``schemas.registry.WARMING_PHASES``, then "ready")."""


def make_worker_id(tier: Tier) -> str:
    """``<tier>-<pid>-<random>@<host>``: readable in Flower and status, and new for every
    start, even where a restarted container gets the same pid and host name: the
    reaper must see the old worker gone to recover the jobs it held.
    """
    return f"{tier.value}-{os.getpid()}-{secrets.token_hex(3)}@{socket.gethostname()}"


def worker_pid(worker_id: str) -> int:
    """The process id inside a :func:`make_worker_id` id."""
    # The tier may be a variant (small@awq-int4): count from the end, the host has no "@".
    return int(worker_id.rpartition("@")[0].rsplit("-", 2)[1])


def run_worker(settings: Settings, options: WorkerOptions) -> int:
    """Run a worker until it is told to stop; return its exit code.

    Raises ``BrokerUnavailable`` if Redis is down and ``EngineError`` if the model
    cannot be loaded; in both cases before any message is taken.
    """
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    if options.gpu is not None:
        # Must be set before vLLM initialises CUDA in this process.
        os.environ["CUDA_VISIBLE_DEVICES"] = options.gpu
    tier_config = settings.tier(options.tier)
    # Before anything is started: a dtype or quantization this device cannot run.
    device = detect_device()
    check_engine_config(options.tier, tier_config, device)
    concurrency = options.concurrency or tier_config.concurrency
    worker_id = make_worker_id(options.tier)
    timeouts = settings.timeouts
    client = redis_client(settings.broker_url)
    _require_redis(client, settings.broker_url)

    # Everything started here is stopped in reverse order, however the worker ends.
    with contextlib.ExitStack() as resources:
        db = make_engine(settings.database_url)
        resources.callback(db.dispose)
        served = served_config(settings, options.tier, make_sessions(db))
        if served.promoted:
            check_engine_config(served.name, served.config, device)
            tier_config = served.config
            log.info("tier %s serves the promoted variant %s", options.tier, served.name)
        registration = WorkerRegistration(
            client,
            worker_id=worker_id,
            tier=options.tier,
            concurrency=concurrency,
            heartbeat_s=timeouts.heartbeat_s,
            expiry_s=timeouts.registry_expiry_s,
        )
        registration.announce()  # visible as "warming" while the model loads
        resources.callback(registration.withdraw)
        _phase(registration, options, "loading")
        model_path = resolve_model(tier_config.model, settings.bundled_model_dir)
        engine = VllmEngine.start(
            model_path=model_path, config=tier_config, timeout_s=timeouts.engine_start_s
        )
        resources.callback(engine.shutdown)
        # Before the job threads start: they inherit the main thread's cores.
        _settle_beside_engine(settings)
        # Leave the registry before the engine goes (withdraw is idempotent).
        resources.callback(registration.withdraw)
        app = make_app(settings, worker_id=worker_id)
        scheduler = _scheduler(settings, options.tier, tier_config, concurrency)
        runtime = WorkerRuntime(
            settings=settings,
            tier=options.tier,
            worker_id=worker_id,
            engine=engine,
            redis=client,
            sessions=make_sessions(db),
            prompts=PromptCatalog(settings.prompts_dir),
            on_engine_dead=stop_this_worker,
            resend=job_sender(app, to_front=True),
            appends=AppendCombiner(client, retry_delays_s=timeouts.publish_retry_delays_s),
            deferred=DeferredWrites(interval_s=timeouts.deferred_write_retry_s),
            metrics=WorkerMetrics(
                tier=options.tier.value, slots=concurrency, in_flight=engine.in_flight
            ),
            scheduling=SchedulerDriver(scheduler),
        )
        if options.metrics_port is not None and runtime.metrics is not None:
            runtime.metrics.serve(options.metrics_port)
            log.info("metrics on :%d/metrics", options.metrics_port)
        registration.track(engine.in_flight, runtime.prefix_stats.snapshot, held=runtime.held.ids)
        keep_warm, timing = _warm_engine(runtime, registration, options, concurrency)
        registration.track(
            engine.in_flight,
            lambda: runtime.prefix_stats.snapshot() | scheduler.snapshot(),
            held=runtime.held.ids,
        )
        warm_job_path(runtime)
        app.runtime = runtime
        for helper in _helpers(runtime, app):
            resources.enter_context(helper)
        resources.enter_context(EngineWatch(engine.alive, runtime.on_engine_dead))
        # Only now is the worker warm: it starts consuming right after this.
        runtime.warm.set()
        registration.mark_warm(timing)
        if options.on_phase is not None:
            options.on_phase("ready")
        if keep_warm is not None:
            resources.enter_context(keep_warm)
        return _consume(app, runtime, options)


def _warm_engine(
    runtime: WorkerRuntime,
    registration: WorkerRegistration,
    options: WorkerOptions,
    concurrency: int,
) -> tuple[KeepWarm | None, EngineTiming]:
    """Warm the engine up, time it and prefill the tier's prompts; the loop that keeps
    them cached (None where ``LLMQ_PREFILL_PROMPTS`` turned prefilling off)."""
    _phase(registration, options, "warm-up")
    warm_up(runtime.engine, concurrency=min(concurrency, 4))
    timing = time_engine(runtime.engine)
    if not runtime.settings.prefill_prompts:
        log.info("system prompts are not prefilled (LLMQ_PREFILL_PROMPTS=0)")
        return None, timing
    keep_warm = KeepWarm(
        runtime.engine,
        runtime.prompts,
        runtime.prefix_stats,
        tier=options.tier.base,  # a variant runs its base tier's prompts
        interval_s=runtime.settings.prefill_interval_s,
        check_s=runtime.settings.timeouts.prompt_check_s,
    )
    _phase(registration, options, "prefilling prompts")
    keep_warm.prefill_now()
    return keep_warm, timing


def _phase(registration: WorkerRegistration, options: WorkerOptions, phase: str) -> None:
    registration.set_phase(phase)
    if options.on_phase is not None:
        options.on_phase(phase)


def _helpers(runtime: WorkerRuntime, app: LlmqCelery) -> list[BackgroundLoop]:
    """The cancel listener, the reaper of dead workers' jobs and the retrier of job
    writes a database outage held back (not yet started)."""
    return [
        CancelListener(runtime.redis, runtime.running),
        reaper_thread(app, runtime.settings, runtime.sessions, runtime.redis),
        runtime.deferred,
    ]


def _settle_beside_engine(settings: Settings) -> None:
    """On a CPU engine: this process's threads off its compute cores, and its engine
    core's spinning wait made nicer (``workers.cpu_pinning``), as the settings ask."""
    if settings.pin_worker_cpus:
        pin_off_compute_cores()
    ease_engine_core(settings.engine_core_nice)


def _scheduler(settings: Settings, tier: Tier, served: TierConfig, slots: int) -> Scheduler:
    """The worker's scheduler: shares, SLOs and prefill places from the configuration it
    serves (``served``, a promoted variant's where one was promoted); the interactive
    hold, batch's longest pause and giving way from the tier's own settings."""
    own = settings.tier(tier)
    shares = slot_shares(served, slots)
    return Scheduler(
        shares,
        clock=time.monotonic,
        interactive_hold_s=own.interactive_hold_s,
        batch_max_pause_s=own.batch_max_pause_s,
        batch_gives_way=own.batch_gives_way,
        slo_share=steered_share(served, shares, clock=time.monotonic),
        batch_prefills_at_once=served.batch_prefills_at_once,
    )


def _consume(app: LlmqCelery, runtime: WorkerRuntime, options: WorkerOptions) -> int:
    scheduler = runtime.scheduling.scheduler
    shares = scheduler.shares
    tier_config = runtime.settings.tier(runtime.tier)
    batch_queue = queue_name(runtime.tier, Priority.BATCH)
    # Before the scheduler's own receipt hook: the engine request is what a person waits on.
    start_on_receipt_of(app)
    install_driver(
        app,
        ConsumerDriver(
            runtime.tier,
            runtime.scheduling,
            running=runtime.running,
            batch_waiting=lambda: bool(runtime.redis.llen(batch_queue)),
        ),
    )
    queues = tier_queues(runtime.tier)
    log.info(
        "worker %s is warm; consuming %s; batch may use %d of %d slots (%s while "
        "interactive work runs)",
        runtime.worker_id,
        ", ".join(queues),
        shares.batch_max,
        shares.slots,
        _under_interactive(scheduler, tier_config.batch_max_pause_s),
    )
    return consume(
        app,
        hostname=runtime.worker_id,
        queues=queues,
        concurrency=shares.threads,
        loglevel=options.loglevel,
    )


def _under_interactive(scheduler: Scheduler, max_pause_s: float) -> str:
    steered = scheduler.slo_share
    if steered is not None:
        return (
            f"what the {steered.ttft_slo_s * 1000:g} ms first-token and "
            f"{steered.itl_slo_s * 1000:g} ms inter-token SLOs leave, "
            f"{steered.low} to {steered.high}"
        )
    shares: SlotShares = scheduler.shares
    share = str(shares.batch_cap(interactive_about=True))
    turn = f", one job after {max_pause_s:g} s without one" if max_pause_s > 0 else ""
    return f"none{turn}" if shares.batch_pauses else share


def stop_this_worker() -> None:
    """Ask Celery for a warm shutdown: running jobs end, then the supervisor restarts us."""
    log.error("the engine died; stopping this worker so it can be restarted")
    os.kill(os.getpid(), signal.SIGTERM)


def _require_redis(client: redis.Redis, url: str) -> None:
    try:
        client.ping()
    except redis.RedisError as exc:
        raise broker_error(exc, doing=f"reach Redis at {redact_url(url)}") from exc
