"""The Celery side every kind of worker shares: its broker settings, the reaper every
worker runs, and its consumer."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import redis
from celery import Celery
from sqlalchemy.orm import Session, sessionmaker

from schemas.queues import GENERATE_TASK, Priority, Tier, celery_config, job_message
from schemas.settings import Settings
from workers.reaper import Reaper, ReaperThread
from workers.transport import TO_FRONT_HEADER, job_ids_in_broker, restore_held, transport_path


def configure_broker(app: Celery, settings: Settings, *, worker_id: str | None) -> None:
    """Give ``app`` the broker settings every llmq app shares. With ``worker_id``,
    every message the app takes is recorded as held by that worker, so the reaper can
    put it back at once if the worker dies."""
    app.conf.update(
        celery_config(
            broker_url=settings.broker_url, visibility_timeout_s=settings.visibility_timeout_s
        )
    )
    if worker_id is not None:
        app.conf.broker_transport_options = {
            **app.conf.broker_transport_options,
            "llmq_worker_id": worker_id,
        }
    app.conf.broker_transport = transport_path(settings.broker_url)


def job_sender(app: Celery, *, to_front: bool = False) -> Callable[[str, Tier, Priority], None]:
    """Sends a job's message (without the request copy: the row is the truth); with
    ``to_front``, to the front of its queue (a job that waited already)."""
    headers = {TO_FRONT_HEADER: True} if to_front else None

    def send(job_id: str, tier: Tier, priority: Priority) -> None:
        app.send_task(GENERATE_TASK, **job_message(job_id, tier, priority), headers=headers)

    return send


def reaper_thread(
    app: Celery, settings: Settings, sessions: sessionmaker[Session], client: redis.Redis
) -> ReaperThread:
    """The reaper of dead workers' jobs (of every tier: every worker runs one), not yet
    started, sending through ``app``."""
    timeouts = settings.timeouts

    def restore(worker_id: str) -> int:
        with app.connection_for_write() as connection:
            return restore_held(connection.default_channel, worker_id)

    reaper = Reaper(
        sessions=sessions,
        redis=client,
        send=job_sender(app),
        restore_held=restore,
        messages_in_broker=lambda: job_ids_in_broker(client),
        max_attempts=settings.max_attempts,
        replay_ttl_s=settings.replay_ttl_s,
        variants=tuple(settings.variants),
        grace_s=timeouts.reaper_missing_grace_s,
        unheld_grace_s=timeouts.reaper_unheld_grace_s,
        sweep_interval_s=timeouts.lost_message_sweep_s,
        lost_message_age_s=timeouts.lost_message_age_s,
    )
    return ReaperThread(reaper, interval_s=timeouts.reaper_interval_s)


def consume(
    app: Celery, *, hostname: str, queues: Sequence[str], concurrency: int, loglevel: str
) -> int:
    """Consume ``queues`` with ``concurrency`` job threads until the worker stops; return
    its exit code.

    One message per slot at a time (``prefetch_multiplier=1``): a message a worker
    holds but cannot start yet is one no other worker can take. Gossip and mingle are
    off: workers learn of each other through the registry, not through Celery.
    """
    worker = app.Worker(
        hostname=hostname,
        queues=list(queues),
        pool="threads",
        concurrency=concurrency,
        prefetch_multiplier=1,
        loglevel=loglevel,
        without_gossip=True,
        without_mingle=True,
        quiet=True,
    )
    worker.start()
    return int(worker.exitcode or 0)
