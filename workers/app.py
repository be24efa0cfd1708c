"""The Celery app: Redis broker, JSON only, one queue per tier and priority."""

from __future__ import annotations

import logging
from collections.abc import Callable
from typing import Any

from celery import Celery, Task

from schemas.errors import DatabaseUnavailable
from schemas.jobs import could_be_job_id
from schemas.queues import GENERATE_TASK, kombu_queues
from schemas.settings import Settings
from workers.consume import configure_broker
from workers.early_start import start_on_receipt
from workers.envelope import ReceivedJobMessage
from workers.job_runner import run_job
from workers.received_starts import JobHint
from workers.transport import job_message_received
from workers.worker_runtime import WorkerRuntime

log = logging.getLogger(__name__)


class LlmqCelery(Celery):  # type: ignore[misc]
    """A Celery app that carries the worker's runtime to its tasks."""

    runtime: WorkerRuntime | None = None


def make_app(settings: Settings, *, worker_id: str | None = None) -> LlmqCelery:
    """Build the app; tasks find the engine through ``app.runtime``, set at start-up.

    With ``worker_id``, every message the app takes is recorded as held by that
    worker, so the reaper can put it back at once if the worker dies.
    """
    app = LlmqCelery("llmq", set_as_current=False)
    configure_broker(app, settings, worker_id=worker_id)
    app.conf.task_queues = kombu_queues()
    app.task(name=GENERATE_TASK, bind=True, acks_late=True)(generate_task)
    return app


def generate_task(
    task: Task,
    job_id: Any = None,
    *_extra: Any,
    request: Any = None,
    priority: Any = None,
    **_extra_kw: Any,
) -> None:
    """Decode the message and run the job. Malformed messages are logged and dropped."""
    if not could_be_job_id(job_id):
        log.error("dropping malformed %s message: job id %r", GENERATE_TASK, job_id)
        return
    runtime = task.app.runtime
    if runtime is None:
        raise RuntimeError("the worker took a job before its engine was started")
    try:
        # Held while its task runs: a row left running after that is one the reaper
        # recovers even though this worker lives (workers.held_jobs).
        with runtime.held.holding(job_id):
            run_job(runtime, job_id, _hint(request, priority))
    except DatabaseUnavailable as exc:
        # The job could not be claimed; try again shortly rather than drop its message.
        log.warning("job %s waits for the database: %s", job_id, exc)
        countdown = runtime.settings.timeouts.db_retry_countdown_s
        raise task.retry(exc=exc, countdown=countdown, max_retries=None) from exc


def _hint(request: Any, priority: Any) -> JobHint | None:
    """The message's copy of its job, when it carries a well-formed one."""
    if isinstance(request, dict) and isinstance(priority, str):
        return JobHint(request=request, priority=priority)
    return None


def start_on_receipt_of(app: LlmqCelery) -> Callable[[], None]:
    """Have ``app``'s worker start an interactive job's engine request as soon as its
    message is read, before Celery builds the job's task (``workers.received_starts``).
    Returns what undoes it."""

    def on_received(message: ReceivedJobMessage | None = None, **_: Any) -> None:
        runtime = app.runtime
        # A retry's message waits for its ETA: its request is started when it runs.
        if runtime is None or message is None or message.eta:
            return
        hint = _hint(message.kwargs.get("request"), message.kwargs.get("priority"))
        if hint is None:
            return
        try:
            start_on_receipt(runtime, message.job_id, hint)
        except Exception:
            # The task starts the job the ordinary way; the consumer must go on reading.
            log.warning("could not start job %s on receipt", message.job_id, exc_info=True)

    job_message_received.connect(on_received, weak=False)
    return lambda: job_message_received.disconnect(on_received)
