"""Starting an embedding worker (``llmq worker --tier embed``): load the model, say
warm, consume ``llm.embed.interactive`` before ``llm.embed.batch``.

Registered like any worker, so the gateway's "no worker serves the embed tier" check,
``llmq status`` and the reaper treat it as they treat a generation tier's.
"""

from __future__ import annotations

import contextlib
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from celery import Celery, Task

from schemas.broker import redis_client
from schemas.db import make_engine, make_sessions
from schemas.errors import DatabaseUnavailable
from schemas.jobs import could_be_job_id
from schemas.queues import GENERATE_TASK, Tier, tier_queues
from schemas.settings import Settings
from workers.append_combiner import AppendCombiner
from workers.consume import configure_broker, consume, reaper_thread
from workers.embeddings.model import SentenceEmbedder
from workers.embeddings.runner import EmbedRuntime, run_embedding_job
from workers.held_jobs import HeldJobs
from workers.registry import EngineTiming, WorkerRegistration
from workers.worker import _require_redis, make_worker_id

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class EmbedWorkerOptions:
    """How ``llmq worker --tier embed`` was asked to run."""

    model_dir: Path
    concurrency: int = 1
    loglevel: str = "INFO"
    on_phase: Callable[[str], None] | None = None
    """Hears each start-up phase ("loading", "warm-up", then "ready")."""


class EmbedCelery(Celery):  # type: ignore[misc]
    """A Celery app that carries the embedding worker's runtime to its task."""

    runtime: EmbedRuntime | None = None
    held: HeldJobs | None = None


def make_embed_app(settings: Settings, *, worker_id: str) -> EmbedCelery:
    """The embedding worker's Celery app: the broker settings every llmq app shares,
    its messages recorded as held by ``worker_id`` (the reaper puts them back at once
    if it dies), and the job task bound to :func:`run_embedding_job`."""
    app = EmbedCelery("llmq-embed", set_as_current=False)
    configure_broker(app, settings, worker_id=worker_id)
    app.task(name=GENERATE_TASK, bind=True, acks_late=True)(embed_task)
    return app


def embed_task(task: Task, job_id: Any = None, *_extra: Any, **_extra_kw: Any) -> None:
    """Decode the message and run the job. Malformed messages are logged and dropped."""
    if not could_be_job_id(job_id):
        log.error("dropping malformed %s message: job id %r", GENERATE_TASK, job_id)
        return
    app: EmbedCelery = task.app
    if app.runtime is None or app.held is None:
        raise RuntimeError("the worker took a job before its model was loaded")
    try:
        with app.held.holding(job_id):
            run_embedding_job(app.runtime, job_id)
    except DatabaseUnavailable as exc:
        log.warning("job %s waits for the database: %s", job_id, exc)
        countdown = app.runtime.timeouts.db_retry_countdown_s
        raise task.retry(exc=exc, countdown=countdown, max_retries=None) from exc


def run_embed_worker(settings: Settings, options: EmbedWorkerOptions) -> int:
    """Run an embedding worker until it is told to stop; return its exit code.

    Raises ``BrokerUnavailable`` if Redis is down, ``ConfigError`` or ``EngineError``
    if the model cannot be loaded; in each case before any message is taken.
    """
    tier = Tier.EMBED
    worker_id = make_worker_id(tier)
    client = redis_client(settings.broker_url)
    _require_redis(client, settings.broker_url)
    with contextlib.ExitStack() as resources:
        db = make_engine(settings.database_url)
        resources.callback(db.dispose)
        sessions = make_sessions(db)
        held = HeldJobs()
        registration = WorkerRegistration(
            client,
            worker_id=worker_id,
            tier=tier,
            concurrency=options.concurrency,
            heartbeat_s=settings.timeouts.heartbeat_s,
            expiry_s=settings.timeouts.registry_expiry_s,
        )
        registration.announce()
        resources.callback(registration.withdraw)
        registration.track(lambda: len(held.ids()), held=held.ids)
        _phase(registration, options, "loading")
        model = SentenceEmbedder.load(options.model_dir)
        _phase(registration, options, "warm-up")
        started = time.monotonic()
        model.embed(["warm-up"])
        took_s = time.monotonic() - started
        app = make_embed_app(settings, worker_id=worker_id)
        app.held = held
        app.runtime = EmbedRuntime(
            worker_id=worker_id,
            sessions=sessions,
            redis=client,
            embed=model.embed,
            replay_ttl_s=settings.replay_ttl_s,
            appends=AppendCombiner(client, retry_delays_s=settings.timeouts.publish_retry_delays_s),
            timeouts=settings.timeouts,
        )
        resources.enter_context(reaper_thread(app, settings, sessions, client))
        registration.mark_warm(EngineTiming(first_token_s=took_s, step_s=took_s))
        if options.on_phase is not None:
            options.on_phase("ready")
        queues = tier_queues(tier)
        log.info(
            "embedding worker %s is warm (%d dimensions); consuming %s",
            worker_id,
            model.dimensions,
            ", ".join(queues),
        )
        return consume(
            app,
            hostname=worker_id,
            queues=queues,
            concurrency=options.concurrency,
            loglevel=options.loglevel,
        )


def _phase(registration: WorkerRegistration, options: EmbedWorkerOptions, phase: str) -> None:
    registration.set_phase(phase)
    if options.on_phase is not None:
        options.on_phase(phase)
