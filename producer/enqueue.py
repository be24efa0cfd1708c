"""Publishing job messages on the tier queues, in Celery's own protocol.

The producer names the task, so it never imports the workers package. A message is
one ``LPUSH`` of what Celery would have sent (``schemas.messages``): Celery's publish
path costs about a millisecond more on every submit, on the way to the first token.
"""

from __future__ import annotations

import redis
from celery import Celery

from schemas.boundary import broker_boundary
from schemas.messages import celery_job_message
from schemas.queues import Priority, Tier, celery_config, kombu_queues, queue_name
from schemas.settings import Settings


class Enqueuer:
    """Sends ``llmq.generate`` messages; one per producer process is enough."""

    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        self._redis = client
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
            self._redis.lpush(queue, celery_job_message(job_id, tier, priority))

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
