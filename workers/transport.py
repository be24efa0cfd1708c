"""A Redis transport that survives garbage on a queue.

kombu's Redis channel decodes each popped list entry with ``json.loads`` inside the
worker's event loop; one entry that is not JSON (or not a message) raises there and
kills the whole worker. Queues are plain Redis lists that anything can push to, so
the worker drops such entries with a log line and a counter, and keeps serving.
"""

from __future__ import annotations

import logging
from typing import Any

from kombu.transport import redis as kombu_redis

log = logging.getLogger(__name__)

DROPPED_COUNTER = "llmq:stats:dropped_messages"


class TolerantChannel(kombu_redis.Channel):
    """Redis channel that drops undecodable queue entries instead of crashing."""

    def _brpop_read(self, **options: Any) -> bool:
        try:
            return bool(super()._brpop_read(**options))  # type: ignore[no-untyped-call]
        except (ValueError, KeyError, TypeError, AttributeError) as exc:
            # The entry was already popped; nothing else can be done with it.
            log.error("dropped a malformed queue entry (%s: %s)", exc.__class__.__name__, exc)
            self.client.incr(DROPPED_COUNTER)
            return True


class TolerantRedisTransport(kombu_redis.Transport):
    """kombu's Redis transport with :class:`TolerantChannel`."""

    Channel = TolerantChannel


TRANSPORT_PATH = f"{__name__}:TolerantRedisTransport"
