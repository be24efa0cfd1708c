"""The worker registry: what a worker reports about itself in its Redis hash.

Workers write an entry every heartbeat (``workers.registry``); the producer's status,
admission and load-aware routing read it. Each field is stored JSON-encoded under its
own name in the hash at :func:`schemas.queues.worker_key`, so a single field can be
read with ``HGET`` and an entry written by an older worker still decodes.

Readers find the entries through the set of known workers, not by scanning key names:
a scan walks every key in Redis (each job's replay log among them), ten per round trip,
and admission reads the registry on a request's first-token path.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Mapping
from typing import Any

import redis
from pydantic import BaseModel, ConfigDict, ValidationError, field_serializer
from redis.typing import EncodableT, FieldT

from schemas.queues import KNOWN_WORKERS_KEY, Tier, worker_key

log = logging.getLogger(__name__)

# What a warming worker reports, in order, so ``llmq up`` and ``llmq top`` can say it.
WARMING_PHASES = ("loading", "warm-up", "prefilling prompts")


class WorkerEntry(BaseModel):
    """One worker as the registry shows it; fields not known here are ignored."""

    model_config = ConfigDict(extra="ignore", frozen=True)

    worker_id: str
    tier: Tier
    concurrency: int = 0
    """Job slots the worker runs at once."""
    warm: bool = False
    """Whether the engine is warm; only then does the worker take work."""
    phase: str | None = None
    """While warming, what the worker is doing: one of :data:`WARMING_PHASES`."""
    in_flight: int = 0
    held_jobs: list[str] | None = None
    """Ids of the jobs whose tasks this worker runs now (None: a worker too old to say).
    A ``running`` row of this worker missing here is one it lost track of."""
    started_at: float | None = None
    warm_at: float | None = None
    seen_at: float | None = None
    """Wall-clock time of the last heartbeat."""
    # Prefix-cache figures (``workers.prefix.PrefixCacheStats.snapshot``).
    prompt_tokens_total: int = 0
    cached_prompt_tokens_total: int = 0
    token_hit_rate: float | None = None
    system_prompt_requests: int = 0
    system_prompt_hits: int = 0
    system_prompt_hit_rate: float | None = None
    prefilled_prompts: list[str] = []
    # A lone request on the warm engine, the recent interactive first tokens (the
    # engine's part), and the batch share they set (``workers.scheduler``).
    engine_first_token_ms: float | None = None
    engine_step_ms: float | None = None
    interactive_first_token_ms_p50: float | None = None
    batch_under_interactive: int | None = None
    """Batch slots the worker leaves to batch work while interactive work is about
    (0: batch pauses then)."""
    interactive_ttft_slo_ms: float | None = None
    """Where the SLO steers that share: the interactive first-token SLO it keeps."""
    batch_share_cuts: int | None = None
    """Where the SLO steers that share: how often an interactive request near the SLO
    cut it."""

    @field_serializer("warm")
    def _warm_as_int(self, warm: bool) -> int:
        # Stored as 0/1, as every worker has written it.
        return int(warm)

    @property
    def free_slots(self) -> int:
        return max(0, self.concurrency - self.in_flight)

    def encode(self) -> dict[FieldT, EncodableT]:
        """The hash fields to ``HSET``: every field JSON-encoded."""
        fields = self.model_dump(mode="json")
        return {name: json.dumps(value) for name, value in fields.items()}

    @classmethod
    def decode(
        cls, raw: Mapping[bytes | str, bytes | str], *, worker_id: str
    ) -> WorkerEntry | None:
        """The entry in the hash fields ``raw`` of worker ``worker_id`` (its key names it,
        should the hash lack the field); None for an empty or unreadable hash."""
        if not raw:
            return None
        fields: dict[str, Any] = {"worker_id": worker_id}
        try:
            for name, value in raw.items():
                fields[_text(name)] = json.loads(value)
            return cls.model_validate(fields)
        except (ValueError, ValidationError) as exc:
            log.warning("unreadable registry entry of %s (%s)", worker_id, type(exc).__name__)
            return None


def _text(value: bytes | str) -> str:
    return value.decode() if isinstance(value, bytes) else value


def write_entry(client: redis.Redis, entry: WorkerEntry, *, expiry_s: int) -> None:
    """Publish ``entry`` in one round trip: its hash, which expires unless written
    again within ``expiry_s``, and its id among the known workers. Raises
    ``redis.RedisError``.

    The id is added at every write, not only the first: a reaper that took this worker
    for dead (its hash lapsed during a Redis restart) removed it.
    """
    key = worker_key(entry.worker_id)
    pipe = client.pipeline(transaction=False)
    pipe.hset(key, mapping=entry.encode())
    pipe.expire(key, expiry_s)
    pipe.sadd(KNOWN_WORKERS_KEY, entry.worker_id)
    pipe.execute()


def read_entries(client: redis.Redis) -> list[WorkerEntry]:
    """Every worker with a live entry, in two round trips whatever else Redis holds.

    A known worker whose hash expired (it died, and no reaper has cleared it yet) is
    left out. Raises ``redis.RedisError``.
    """
    worker_ids = sorted(_text(member) for member in client.smembers(KNOWN_WORKERS_KEY))
    if not worker_ids:
        return []
    pipe = client.pipeline(transaction=False)
    for worker_id in worker_ids:
        pipe.hgetall(worker_key(worker_id))
    hashes = pipe.execute()
    entries = [
        WorkerEntry.decode(raw, worker_id=worker_id)
        for worker_id, raw in zip(worker_ids, hashes, strict=True)
    ]
    return [entry for entry in entries if entry is not None]
