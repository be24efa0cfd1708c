"""Publishing job messages on the tier queues, through Celery's own protocol.

The producer sends by task name, so it never imports the workers package.
"""

from __future__ import annotations

from celery import Celery

from schemas.boundary import broker_boundary
from schemas.queues import (
    GENERATE_TASK,
    Priority,
    Tier,
    celery_config,
    job_message,
    kombu_queues,
    queue_name,
)
from schemas.settings import Settings

# A Redis blip is retried briefly; a Redis that is down fails the submit fast.
PUBLISH_RETRY_POLICY = {"max_retries": 2, "interval_start": 0, "interval_step": 0.1}


class Enqueuer:
    """Sends ``llmq.generate`` messages; one per producer process is enough."""

    def __init__(self, settings: Settings) -> None:
        self._app = Celery("llmq-producer", set_as_current=False)
        self._app.conf.update(
            celery_config(
                broker_url=settings.broker_url,
                visibility_timeout_s=settings.visibility_timeout_s,
            )
        )
        self._app.conf.task_queues = kombu_queues()

    def enqueue(self, job_id: str, *, tier: Tier, priority: Priority) -> None:
        """Publish one job; raises ``BrokerUnavailable`` if Redis cannot take it."""
        queue = queue_name(tier, priority)
        with broker_boundary(f"enqueue on {queue}", then="nothing was enqueued"):
            self._app.send_task(
                GENERATE_TASK,
                **job_message(job_id, tier, priority),
                retry=True,
                retry_policy=PUBLISH_RETRY_POLICY,
            )

    def connect(self) -> None:
        """Open the broker connection now; raises ``BrokerUnavailable``."""
        with broker_boundary("connect to the broker"), self._app.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=1)
            # Declaring binds each queue once; done here, the first publish skips it.
            for queue in self._app.amqp.queues.values():
                producer.maybe_declare(queue)

    def close(self) -> None:
        """Release broker connections."""
        self._app.close()
