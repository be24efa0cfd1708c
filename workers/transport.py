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

Every message a worker takes is also recorded under its worker id (``held_key``), in
the same transaction as kombu's own unacknowledged entry. kombu alone cannot tell
whose a message is, so a message a dead worker held (claimed or not yet) would wait
for the visibility timeout; with the record, the reaper puts it back within seconds
(:func:`restore_held`).

A message's records are written right after Celery has handed its job to a thread,
not before: the round trip then overlaps the job's start instead
of delaying it. If the worker dies in between, the job's row still says queued and the
reaper's lost-message sweep, which a worker's death triggers, sends it again.
"""

from __future__ import annotations

import contextlib
import json
import logging
import threading
import time
from collections.abc import Iterator
from typing import Any

import redis
from celery.utils.dispatch import Signal
from kombu.transport import redis as kombu_redis
from kombu.transport import virtual
from kombu.utils.json import dumps

from schemas.messages import message_job_id
from schemas.queues import (
    DROPPED_MESSAGES_KEY,
    KNOWN_WORKERS_KEY,
    Tier,
    all_queues,
    held_key,
    tier_queues,
)
from workers.envelope import MalformedMessage, is_job_queue, read_job_message

log = logging.getLogger(__name__)


class TolerantQoS(kombu_redis.QoS):
    """QoS that gives up quietly on messages of a connection that is gone.

    After a reconnect, jobs that were running finish and ack through their old,
    closed channel; kombu raises ``AttributeError`` there, which would stop the worker.
    Such an ack has nothing left to do: the restarted Redis no longer holds the message.
    """

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[no-untyped-call]
        # Records of messages taken and not yet written to Redis (tag -> entry). The
        # lock also keeps an acknowledgement from overtaking its message's write.
        self._unwritten: dict[Any, str] = {}
        self._records_lock = threading.Lock()
        self._deferring = False

    @property
    def holder(self) -> str | None:
        """The worker id this channel takes messages for (None outside a worker)."""
        return getattr(self.channel, "llmq_worker_id", None)

    def append(self, message: Any, delivery_tag: Any) -> None:
        if self.holder is None:
            super().append(message, delivery_tag)  # type: ignore[no-untyped-call]
            return
        delivery = message.delivery_info
        entry = dumps([message._raw, delivery["exchange"], delivery["routing_key"]])  # type: ignore[no-untyped-call]
        with self._records_lock:
            self._unwritten[delivery_tag] = entry
        virtual.QoS.append(self, message, delivery_tag)  # type: ignore[no-untyped-call]
        if not self._deferring:
            self.write_records()

    @contextlib.contextmanager
    def records_after(self) -> Iterator[None]:
        """Write the records of messages taken inside the block when it ends."""
        self._deferring = True
        try:
            yield
        finally:
            self._deferring = False
            self.write_records()

    def write_records(self) -> None:
        """Record every message taken and not yet recorded as unacknowledged, and as
        held by this worker, in one MULTI/EXEC: no crash leaves one held by nobody."""
        holder = self.holder
        with self._records_lock:
            if not self._unwritten or holder is None:
                return
            now = time.time()
            with self.pipe_or_acquire() as pipe:
                for delivery_tag, entry in self._unwritten.items():
                    pipe.zadd(self.unacked_index_key, {delivery_tag: now})
                    pipe.hset(self.unacked_key, delivery_tag, entry)
                    pipe.hset(held_key(holder), delivery_tag, "1")
                pipe.sadd(KNOWN_WORKERS_KEY, holder)
                self._unwritten.clear()
                pipe.execute()

    def _remove_from_indices(self, delivery_tag: Any, pipe: Any = None) -> Any:
        with self._records_lock:
            # Acknowledged before its record was written: nothing left to write.
            self._unwritten.pop(delivery_tag, None)
        pipe = super()._remove_from_indices(delivery_tag, pipe)  # type: ignore[no-untyped-call]
        holder = self.holder
        if holder is not None:
            pipe.hdel(held_key(holder), delivery_tag)
        return pipe

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
            self.write_records()  # what is restored is read back from the records
            super().restore_unacked(client)  # type: ignore[no-untyped-call]
        except (AttributeError, OSError, redis.RedisError) as exc:
            log.warning(
                "could not requeue %d running job message(s) on a lost connection (%s)",
                len(self._delivered),
                exc.__class__.__name__,
            )
            self._delivered.clear()


TO_FRONT_HEADER = "llmq_to_front"
"""A message header: put this message at the front of its queue, not the back."""


class TolerantChannel(kombu_redis.Channel):
    """Redis channel that drops undecodable queue entries instead of crashing, and
    puts a message marked :data:`TO_FRONT_HEADER` at the front of its queue."""

    QoS = TolerantQoS
    #: Set from the ``llmq_worker_id`` transport option in a worker's app.
    llmq_worker_id: str | None = None
    from_transport_options = (  # type: ignore[assignment]
        *kombu_redis.Channel.from_transport_options,
        "llmq_worker_id",
    )

    def _put(self, queue: str, message: Any, **kwargs: Any) -> None:
        headers = message.get("headers") or {}
        if not headers.get(TO_FRONT_HEADER):
            super()._put(queue, message, **kwargs)  # type: ignore[no-untyped-call]
            return
        # kombu pushes on the left and pops on the right: the right is the front. (A
        # publish batch, which only defers kombu's push, is not used for this one.)
        priority = self._get_message_priority(message, reverse=False)  # type: ignore[no-untyped-call]
        key = self._q_for_pri(queue, priority)  # type: ignore[no-untyped-call]
        with self.conn_or_acquire() as client:
            client.rpush(key, dumps(message))  # type: ignore[no-untyped-call]

    def _brpop_read(self, **options: Any) -> bool:
        try:
            return bool(super()._brpop_read(**options))  # type: ignore[no-untyped-call]
        except (ValueError, KeyError, TypeError, AttributeError, RecursionError) as exc:
            # The entry was already popped; nothing else can be done with it.
            log.error("dropped a malformed queue entry (%s: %s)", exc.__class__.__name__, exc)
            self.client.incr(DROPPED_MESSAGES_KEY)
            return True


class TolerantRedisTransport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`TolerantChannel`; delivers job messages only."""

    Channel = TolerantChannel

    def _deliver(self, message: Any, queue: str) -> None:
        # Job queues only: Celery's own control messages (Flower's inspect) pass as they are.
        if is_job_queue(queue):
            try:
                job = read_job_message(message)
            except MalformedMessage as exc:
                # Popped already: dropping it is all that is left; it must not reach Celery.
                log.error("dropped a queue entry on %s: %s", queue, exc)
                for channel in self.channels[:1]:
                    channel.client.incr(DROPPED_MESSAGES_KEY)
                return
            job_message_received.send(sender=self, message=job)
        with contextlib.ExitStack() as records:
            for channel in self.channels:
                if isinstance(channel.qos, TolerantQoS):
                    records.enter_context(channel.qos.records_after())
            super()._deliver(message, queue)  # type: ignore[no-untyped-call]


job_message_received = Signal(name="job_message_received", providing_args={"message"})
"""Sent with each well-formed job message (a ``ReceivedJobMessage``) the moment it is read,
before Celery builds its task: what a receiver starts here is ahead of Celery's
strategy, the pool's hand-over and the task's tracing. Receivers run on the worker's
consumer thread, so they must be quick; an exception in one is logged."""


TRANSPORT_PATH = f"{__name__}:TolerantRedisTransport"


def restore_held(channel: Any, worker_id: str) -> int:
    """Put every message ``worker_id`` took and never acknowledged back on its queue.

    For a worker known dead. Each message goes to the front of its queue (it waited
    already); one that was acknowledged or restored meanwhile is skipped, so two
    reapers doing this at once restore each message once. Returns how many went back.
    """
    client = channel.client
    qos = channel.qos
    restored = 0
    for raw_tag in client.hkeys(held_key(worker_id)):
        tag = raw_tag.decode() if isinstance(raw_tag, bytes) else str(raw_tag)
        if client.hexists(qos.unacked_key, tag):
            restored += 1
        qos.restore_by_tag(tag, client=client)
    pipe = client.pipeline()
    pipe.delete(held_key(worker_id))
    pipe.srem(KNOWN_WORKERS_KEY, worker_id)
    pipe.execute()
    return restored


class TolerantSentinelChannel(TolerantChannel, kombu_redis.SentinelChannel):
    """:class:`TolerantChannel` whose connections ask Redis Sentinel for the master.

    kombu's sentinel channel builds its connection pools through the sentinels, so
    after a failover the worker's reconnect reaches the promoted replica.
    """

    from_transport_options = (  # type: ignore[assignment]
        *kombu_redis.SentinelChannel.from_transport_options,
        "llmq_worker_id",
    )


class TolerantSentinelTransport(TolerantRedisTransport):
    """:class:`TolerantRedisTransport` through Redis Sentinel (``sentinel://`` URLs)."""

    Channel = TolerantSentinelChannel
    default_port = kombu_redis.SentinelTransport.default_port  # type: ignore[assignment]


SENTINEL_TRANSPORT_PATH = f"{__name__}:TolerantSentinelTransport"


def transport_path(broker_url: str) -> str:
    """The worker's kombu transport for ``broker_url``: through Sentinel or direct."""
    from schemas.broker import is_sentinel_url

    return SENTINEL_TRANSPORT_PATH if is_sentinel_url(broker_url) else TRANSPORT_PATH


def job_ids_in_broker(client: redis.Redis) -> set[str]:
    """Ids of every job with a message on a queue or taken and not yet acknowledged.

    A queued job missing from this set has no message anywhere (its worker died
    between popping the message and recording it, or a failover lost it).
    """
    # Variants' queues (llm.small@bf16.*) are found by name: no list of them is kept.
    variant_queues = {
        key.decode() if isinstance(key, bytes) else str(key)
        for key in client.scan_iter(match="llm.*@*.*", count=1000)
    }
    pipe = client.pipeline(transaction=False)
    variant_queues = {q for q in variant_queues if is_job_queue(q)}
    for queue in [*all_queues(), *tier_queues(Tier.EMBED), *sorted(variant_queues)]:
        pipe.lrange(queue, 0, -1)
    pipe.hvals(UNACKED_KEY)
    *queued, unacked = pipe.execute()
    messages = [_loads(raw) for entries in queued for raw in entries]
    messages += [entry[0] for entry in map(_loads, unacked) if isinstance(entry, list) and entry]
    return {job_id for job_id in map(message_job_id, messages) if job_id}


# kombu's default key for messages taken and not yet acknowledged.
UNACKED_KEY = "unacked"


def _loads(raw: bytes | str) -> Any:
    try:
        return json.loads(raw)
    except ValueError:
        return None
