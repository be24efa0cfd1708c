"""``llmq beat``: the Celery beat schedule of the nightly run, and the task it sends.

One process runs the scheduler and consumes the one queue it sends to
(``llmq.summaries``), so the night's runner lives beside its schedule and never in a
GPU worker. Two beat processes send the task twice; the night's lock and the
summaries' unique constraint make the second a no-op (see ``workers.summaries.night``).
"""

from __future__ import annotations

import logging
from datetime import UTC, datetime
from typing import Any

from celery import Celery
from celery.schedules import crontab

from producer.client import Client
from schemas.queues import SUMMARY_NIGHT_QUEUE, celery_config
from schemas.settings import Settings
from workers.summaries.night import NightReport, NightRunner, previous_day

log = logging.getLogger(__name__)

NIGHT_TASK = "llmq.summaries.night"


def cron_schedule(cron: str) -> Any:
    """A Celery crontab from five cron fields (minute hour day-of-month month day-of-week)."""
    minute, hour, day_of_month, month, day_of_week = cron.split()
    return crontab(
        minute=minute,
        hour=hour,
        day_of_month=day_of_month,
        month_of_year=month,
        day_of_week=day_of_week,
    )


def make_beat_app(settings: Settings) -> Celery:
    """The beat process's app: the nightly schedule and the task it runs."""
    app = Celery("llmq-beat", set_as_current=False)
    app.conf.update(
        celery_config(
            broker_url=settings.broker_url,
            visibility_timeout_s=int(settings.timeouts.summary_night_s) + 600,
        )
    )
    # Kombu's own transport: the llmq one admits only job messages.
    app.conf.timezone = settings.summary_timezone
    app.conf.enable_utc = True
    app.conf.task_default_queue = SUMMARY_NIGHT_QUEUE
    app.conf.beat_schedule = {
        "nightly-summaries": {
            "task": NIGHT_TASK,
            "schedule": cron_schedule(settings.summary_cron),
            "options": {"queue": SUMMARY_NIGHT_QUEUE},
        }
    }

    def night(*_args: Any, **_kwargs: Any) -> dict[str, Any]:
        report = run_last_night(settings)
        return {"day": report.day.isoformat(), "done": report.done, "failed": report.failed}

    app.task(name=NIGHT_TASK, acks_late=True)(night)
    return app


def run_last_night(settings: Settings, *, now: datetime | None = None) -> NightReport:
    """Summarize yesterday (in the configured time zone); log and return the counts."""
    day = previous_day(now or datetime.now(UTC), settings.summary_timezone)
    with Client(settings) as client:
        report = NightRunner(settings, client, poll_s=2.0).run(
            day, on_held="skip", timeout_s=settings.timeouts.summary_night_s
        )
    if report.held_elsewhere:
        log.info("the night of %s is being run elsewhere", day)
    else:
        log.info(
            "summaries of %s: %d done, %d failed, %d skipped, %d remaining (%.0f s)",
            day,
            report.done,
            report.failed,
            report.skipped,
            report.remaining,
            report.seconds,
        )
    return report


def run_beat(settings: Settings, *, loglevel: str = "INFO") -> int:
    """Run the scheduler and the nightly task's consumer until stopped."""
    app = make_beat_app(settings)
    schedule_file = settings.model_cache_dir.expanduser() / "beat-schedule"
    schedule_file.parent.mkdir(parents=True, exist_ok=True)
    worker = app.Worker(
        queues=[SUMMARY_NIGHT_QUEUE],
        beat=True,
        schedule_filename=str(schedule_file),
        pool="solo",
        concurrency=1,
        loglevel=loglevel,
        without_gossip=True,
        without_mingle=True,
    )
    worker.start()
    return int(worker.exitcode or 0)
