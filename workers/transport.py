"""A Redis transport that survives garbage on a queue and a Redis restart.

kombu's Redis channel decodes each popped list entry with ``json.loads`` inside the
worker's event loop; one entry that is not JSON (or not a message) raises there and
kills the whole worker. Queues are plain Redis lists that anything can push to, so
the worker drops such entries with a log line and a counter, and keeps serving.

When the broker connection drops, Celery closes the channel, and kombu then tries to
requeue the messages of running jobs through a client it has already let go of; the
``AttributeError`` that follows kills the worker instead of letting it reconnect. The
requeue is skipped: those jobs keep running here, and if this worker dies, the reaper
(and, as a backstop, the visibility timeout) sends them again.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any

import redis
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual

from workers.envelope import envelope_problem, is_job_queue

log = logging.getLogger(__name__)

DROPPED_COUNTER = "llmq:stats:dropped_messages"


class TolerantQoS(kombu_redis.QoS):
    """QoS that gives up quietly on messages of a connection that is gone.

    After a reconnect, jobs that were running finish and ack through their old,
    closed channel; kombu raises ``AttributeError`` there, which would stop the worker.
    Such an ack has nothing left to do: the restarted Redis no longer holds the message.
    """

    def ack(self, delivery_tag: Any) -> None:
        try:
            super().ack(delivery_tag)  # type: ignore[no-untyped-call]
        except (AttributeError, OSError, redis.RedisError) as exc:
            log.warning("could not acknowledge a message (%s)", exc.__class__.__name__)
            self._forget(delivery_tag)

    def reject(self, delivery_tag: Any, requeue: bool = False) -> None:
        try:
            super().reject(delivery_tag, requeue=requeue)  # type: ignore[no-untyped-call]
        except (AttributeError, OSError, redis.RedisError) as exc:
            log.warning("could not reject a message (%s)", exc.__class__.__name__)
            self._forget(delivery_tag)

    def _forget(self, delivery_tag: Any) -> None:
        # Free the prefetch slot the message held, or a live channel would lose one
        # slot per failed acknowledgement.
        with contextlib.suppress(KeyError):
            virtual.QoS.ack(self, delivery_tag)  # type: ignore[no-untyped-call]

    def restore_unacked(self, client: Any = None) -> None:
        try:
            super().restore_unacked(client)  # type: ignore[no-untyped-call]
        except (AttributeError, OSError, redis.RedisError) as exc:
            log.warning(
                "could not requeue %d running job message(s) on a lost connection (%s)",
                len(self._delivered),
                exc.__class__.__name__,
            )
            self._delivered.clear()


class TolerantChannel(kombu_redis.Channel):
    """Redis channel that drops undecodable queue entries instead of crashing."""

    QoS = TolerantQoS

    def _brpop_read(self, **options: Any) -> bool:
        try:
            return bool(super()._brpop_read(**options))  # type: ignore[no-untyped-call]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            # The entry was already popped; nothing else can be done with it.
            log.error("dropped a malformed queue entry (%s: %s)", exc.__class__.__name__, exc)
            self.client.incr(DROPPED_COUNTER)
            return True


class TolerantRedisTransport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`TolerantChannel`; delivers job messages only."""

    Channel = TolerantChannel

    def _deliver(self, message: Any, queue: str) -> None:
        # Job queues only: Celery's own control messages (Flower's inspect) pass as they are.
        problem = envelope_problem(message) if is_job_queue(queue) else None
        if problem is None:
            super()._deliver(message, queue)  # type: ignore[no-untyped-call]
            return
        # Popped already: dropping it is all that is left, and it must not reach Celery.
        log.error("dropped a queue entry on %s: %s", queue, problem)
        for channel in self.channels:
            channel.client.incr(DROPPED_COUNTER)
            break


TRANSPORT_PATH = f"{__name__}:TolerantRedisTransport"
