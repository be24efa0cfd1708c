"""Publishing job messages on the tier queues, in Celery's own protocol.

The producer names the task, so it never imports the workers package. A message is
one ``LPUSH`` of what Celery would have sent (``schemas.messages``), behind the queue's
depth check in the same script: Celery's publish path would add its own work to every
submit, on the way to the first token.
"""

from __future__ import annotations

import json
from collections.abc import Collection
from typing import Any

import redis
from celery import Celery

from producer.admission import queue_full
from schemas.boundary import broker_boundary
from schemas.messages import JobMessage, celery_job_message, message_job_id
from schemas.queues import Priority, Tier, celery_config, kombu_queues
from schemas.settings import Settings

# KEYS[1]: the queue. ARGV: the message, the depth limit (-1: none). The depth check and
# the push are one round trip and one atomic step: no burst of submits can pass one
# stale depth. Returns the depth before the push, or -(depth + 1) when the queue is
# full and nothing was pushed.
PUSH_IF_ROOM = """
local depth = redis.call('LLEN', KEYS[1])
local limit = tonumber(ARGV[2])
if limit >= 0 and depth >= limit then return -depth - 1 end
redis.call('LPUSH', KEYS[1], ARGV[1])
return depth
"""


# Entries read per round trip while scanning a queue for messages to withdraw.
WITHDRAW_SCAN_CHUNK = 1000


def withdraw_jobs(client: redis.Redis, queue: str, job_ids: Collection[str]) -> int:
    """Take the messages of ``job_ids`` that no worker has taken yet off ``queue``;
    return how many were taken. Other entries stay where they are.

    A cancelled queued job's message is otherwise left for a worker to pop and skip
    (its claim finds no queued row); this removes it instead, for a caller that drops
    many jobs at once. It reads the whole queue, so it is not for a hot path.
    """
    wanted = set(job_ids)
    found: list[Any] = []  # entries as Redis returned them, to remove byte for byte
    start = 0
    while wanted:
        entries = client.lrange(queue, start, start + WITHDRAW_SCAN_CHUNK - 1)
        found += [raw for raw in entries if _message_job_id(raw) in wanted]
        if len(entries) < WITHDRAW_SCAN_CHUNK:
            break
        start += WITHDRAW_SCAN_CHUNK
    pipe = client.pipeline(transaction=False)
    for raw in found:
        pipe.lrem(queue, 1, raw)
    return sum(int(removed) for removed in pipe.execute()) if found else 0


def _message_job_id(raw: bytes | str) -> str | None:
    """The job id a queue entry names, or None for an entry that is not a message."""
    try:
        return message_job_id(json.loads(raw))
    except ValueError:
        return None


class Enqueuer:
    """Sends ``llmq.generate`` messages; one per producer process is enough."""

    def __init__(self, settings: Settings, client: redis.Redis) -> None:
        self._redis = client
        self._push_if_room = client.register_script(PUSH_IF_ROOM)
        self._app = Celery("llmq-producer", set_as_current=False)
        self._app.conf.update(
            celery_config(
                broker_url=settings.broker_url,
                visibility_timeout_s=settings.visibility_timeout_s,
            )
        )
        self._app.conf.task_queues = kombu_queues()

    def enqueue(
        self,
        job_id: str,
        *,
        tier: Tier,
        priority: Priority,
        max_depth: int | None = None,
        request: dict[str, Any] | None = None,
    ) -> JobMessage:
        """Publish one job; raises ``QueueFull`` when its queue already holds ``max_depth``
        messages (nothing is pushed), ``BrokerUnavailable`` if Redis cannot take it.

        ``request``, the job's stored request, lets a worker start an interactive job
        while it claims the row (see ``schemas.messages``).
        """
        message = celery_job_message(job_id, tier, priority, request=request)
        self.push(message, max_depth=max_depth)
        return message

    def push(self, message: JobMessage, *, max_depth: int | None = None) -> None:
        """Push ``message`` on its queue; raises as :meth:`enqueue` does."""
        with broker_boundary(f"enqueue on {message.queue}", then="nothing was enqueued"):
            limit = -1 if max_depth is None else max_depth
            depth = int(self._push_if_room(keys=[message.queue], args=[message.text, limit]))
        if depth < 0:
            raise queue_full(message.queue, -depth - 1, max_depth or 0)

    def withdraw(self, message: JobMessage) -> bool:
        """Take ``message`` back off its queue if no worker has taken it yet; True if it
        was. Best effort: False too when Redis cannot be reached."""
        try:
            return bool(self._redis.lrem(message.queue, 1, message.text))
        except redis.RedisError:
            return False

    def connect(self) -> None:
        """Open the broker connection now; raises ``BrokerUnavailable``."""
        with broker_boundary("connect to the broker"), self._app.producer_or_acquire() as producer:
            producer.connection.ensure_connection(max_retries=1)
            # Declaring binds each queue once, and loading the script makes the first
            # push one round trip too.
            self._redis.script_load(PUSH_IF_ROOM)
            for queue in self._app.amqp.queues.values():
                producer.maybe_declare(queue)

    def close(self) -> None:
        """Release broker connections."""
        self._app.close()
