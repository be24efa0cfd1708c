"""Tiers, priorities, queue names, and every Redis key and channel llmq uses.

Keys are data: a renamed key strands what a running deployment already wrote, so each
string here stays as it is. Every module reads its key names from here.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Iterator
from enum import StrEnum
from typing import Any, ClassVar

from schemas.broker import celery_broker_url, sentinel_transport_options

GENERATE_TASK = "llmq.generate"
"""Celery task name that runs one generation job (its only argument is the job id)."""


BASE_TIERS = ("small", "medium", "large")
"""The model size classes, smallest first; see the tier definitions in the design notes."""

EMBED_TIER = "embed"
"""The embedding tier (``POST /v1/embeddings``): a tier of its own, with its own queues
and workers, never chosen by ``auto`` and never iterated with the base tiers."""

MAX_TIER_NAME = 16
"""The longest tier name (the job table's column holds 16 characters)."""

_VARIANT = re.compile(r"[a-z0-9][a-z0-9_-]*")


class _TierType(type):
    """Iterating ``Tier`` gives the base tiers only: variants are never chosen by auto."""

    def __iter__(cls) -> Iterator[Tier]:
        return iter(_BASE_TIERS)

    def __len__(cls) -> int:
        return len(_BASE_TIERS)


class Tier(str, metaclass=_TierType):
    """A tier name: a base tier (``small``, ``medium``, ``large``) or a variant of one.

    A variant is ``<base>@<name>`` (``small@bf16``, ``large@awq``): its own engine
    settings, queues and workers, addressed only by its full name. ``Tier("x")`` raises
    ``ValueError`` for anything else. Behaves like the string it names (comparisons,
    hashing, JSON), and iterating the class gives the base tiers, smallest first.
    """

    __slots__ = ()

    SMALL: ClassVar[Tier]
    MEDIUM: ClassVar[Tier]
    LARGE: ClassVar[Tier]
    EMBED: ClassVar[Tier]

    def __new__(cls, value: object) -> Tier:
        if isinstance(value, Tier):
            return value
        known = _BASE_BY_NAME.get(value) if isinstance(value, str) else None
        if known is not None:
            return known
        if not isinstance(value, str) or not is_tier_name(value):
            raise ValueError(f"{value!r} is not a valid Tier")
        return super().__new__(cls, value)

    @property
    def value(self) -> str:
        """The name as a plain string."""
        return str.__str__(self)

    @property
    def name(self) -> str:
        """``SMALL``, ``SMALL@BF16``: the spelling an enum member would have."""
        return self.value.upper()

    @property
    def base(self) -> Tier:
        """The base tier a variant belongs to (a base tier's is itself)."""
        return _BASE_BY_NAME[self.value.partition("@")[0]]

    @property
    def variant(self) -> str | None:
        """The variant's own part (``bf16`` of ``small@bf16``); None for a base tier."""
        return self.value.partition("@")[2] or None

    @property
    def is_variant(self) -> bool:
        return "@" in self.value

    def __str__(self) -> str:
        return self.value

    def __repr__(self) -> str:
        return f"Tier({self.value!r})"

    def __reduce__(self) -> tuple[type[Tier], tuple[str]]:
        return (Tier, (self.value,))

    @classmethod
    def __get_pydantic_core_schema__(cls, _source: Any, _handler: Any) -> Any:
        from pydantic_core import core_schema

        return core_schema.no_info_after_validator_function(
            cls,
            core_schema.str_schema(),
            serialization=core_schema.plain_serializer_function_ser_schema(str),
        )


def is_tier_name(value: str) -> bool:
    """True for a base tier, ``<base>@<variant>`` (lower case, digits, ``-``, ``_``) or
    the embedding tier."""
    if value == EMBED_TIER:
        return True
    base, at, variant = value.partition("@")
    if base not in BASE_TIERS or len(value) > MAX_TIER_NAME:
        return False
    return not at or _VARIANT.fullmatch(variant) is not None


_BASE_TIERS: tuple[Tier, ...] = tuple(str.__new__(Tier, name) for name in BASE_TIERS)
Tier.SMALL, Tier.MEDIUM, Tier.LARGE = _BASE_TIERS
Tier.EMBED = str.__new__(Tier, EMBED_TIER)
# The embedding tier is its own base: no variants, and never among the base tiers.
_BASE_BY_NAME: dict[str, Tier] = {tier.value: tier for tier in (*_BASE_TIERS, Tier.EMBED)}


class Priority(StrEnum):
    """``interactive``: a person waits. ``batch``: nobody waits."""

    INTERACTIVE = "interactive"
    BATCH = "batch"


QUEUE_PREFIX = "llm"


def queue_name(tier: Tier, priority: Priority) -> str:
    """Return the Redis queue for a tier and priority: ``llm.<tier>.<priority>``."""
    return f"{QUEUE_PREFIX}.{Tier(tier).value}.{Priority(priority).value}"


def parse_queue_name(name: str) -> tuple[Tier, Priority]:
    """Inverse of :func:`queue_name`; raises ``ValueError`` for anything else."""
    prefix, tier, priority = name.split(".")  # tier names never hold a dot
    if prefix != QUEUE_PREFIX:
        raise ValueError(f"not an llmq queue: {name!r}")
    return Tier(tier), Priority(priority)


def tier_queues(tier: Tier) -> list[str]:
    """The queues a worker of ``tier`` reads, most urgent first."""
    return [queue_name(tier, priority) for priority in Priority]


def all_queues(variants: Iterable[Tier] = ()) -> list[str]:
    """Every base tier's queues (and ``variants``'), tier by tier, interactive first."""
    tiers = [*Tier, *(Tier(v) for v in variants if Tier(v).is_variant)]
    return [name for tier in tiers for name in tier_queues(tier)]


def kombu_queues() -> list[Any]:
    """Every tier queue (the embedding tier's too) as a kombu ``Queue``, for producer
    and worker Celery apps alike."""
    from kombu.entity import Exchange, Queue

    return [
        Queue(name, Exchange(name, type="direct"), routing_key=name)  # type: ignore[no-untyped-call]
        for name in [*all_queues(), *tier_queues(Tier.EMBED)]
    ]


def job_message(job_id: str, tier: Tier, priority: Priority) -> dict[str, Any]:
    """``send_task`` keywords of a job's message; producer and reaper send the same one.

    The message carries only the job id (the worker reads the row), and the job id is
    also the task id, so a re-sent message is recognisably the same job.
    """
    queue = queue_name(tier, priority)
    return {"args": [job_id], "queue": queue, "routing_key": queue, "task_id": job_id}


KEY_PREFIX = "llmq:"
"""Every Redis key and channel of llmq starts with this (queues are ``llm.*``, Celery's)."""

# A job's stream and cancellation.

CANCEL_CHANNEL = "llmq:cancel"
"""Pub/sub channel on which producers name jobs to cancel; every worker listens."""


def cancel_key(job_id: str) -> str:
    """Redis key marking a job as cancelled, for a worker that missed the pub/sub message."""
    return f"llmq:job:{job_id}:cancel"


def event_channel(job_id: str) -> str:
    """Pub/sub channel that carries a job's stream events live."""
    return f"llmq:job:{job_id}:events"


def event_log_key(job_id: str) -> str:
    """Redis list holding every stream event of a job; index == sequence number."""
    return f"llmq:job:{job_id}:log"


# Workers: the registry (see ``schemas.registry``), held messages, recovery.

WORKER_KEY_PREFIX = "llmq:worker:"


def worker_key(worker_id: str) -> str:
    """Redis hash where a worker reports its tier, warmth and load."""
    return f"{WORKER_KEY_PREFIX}{worker_id}"


KNOWN_WORKERS_KEY = "llmq:workers"
"""Set of every worker id that announced itself or took a message, until a reaper has
recovered what it left behind; the registry hash of a dead worker expires, this stays."""


def held_key(worker_id: str) -> str:
    """Redis hash of the delivery tags a worker has taken off a queue and not yet acked.

    Written in the same transaction as the broker's own unacknowledged entry, so when
    the worker dies its messages can be put back at once instead of after the
    visibility timeout.
    """
    return f"llmq:held:{worker_id}"


def queues_kept_key(tier: Tier) -> str:
    """Marker (no TTL) that ``tier``'s queues survived: missing only when Redis lost its
    data, and then a reaper re-sends every queued job of the tier."""
    return f"llmq:queues-kept:{Tier(tier).value}"


LOST_MESSAGE_SWEEP_LOCK_KEY = "llmq:lock:lost-message-sweep"
"""Lock that lets one reaper at a time re-send jobs whose message was lost."""


def summary_night_lock_key(day: str) -> str:
    """Lock one summary runner holds while it works the night of ``day`` (YYYY-MM-DD)."""
    return f"llmq:lock:summaries:{day}"


SUMMARY_NIGHT_QUEUE = "llmq.summaries"
"""Queue of the nightly-run task that ``llmq beat`` schedules and consumes itself."""

# Counters.

SERVICE_MS_KEY = "llmq:stats:service_ms"
"""Hash of each tier's moving-average job service time, which load-aware routing reads."""

ROUTING_COUNTS_KEY = "llmq:stats:routing"
"""Hash counting routing decisions by ``<tier>:<kind>``."""

DROPPED_MESSAGES_KEY = "llmq:stats:dropped_messages"
"""Counter of malformed messages workers took off a queue and dropped."""

# The gateway's per-key limits.


def rate_limit_key(key_id: str) -> str:
    """Sorted set of an API key's recent requests (sliding window)."""
    return f"llmq:ratelimit:{key_id}"


def auth_failure_key(address: str) -> str:
    """Sorted set of a client address's recent failed authentications."""
    return f"llmq:authfail:{address}"


def open_streams_key(key_id: str) -> str:
    """Sorted set of an API key's open gateway streams, scored by lease expiry."""
    return f"llmq:streams:{key_id}"


# Not a setting: the scheduler's slot refill and kombu's polling are designed around it,
# and producers and workers share it.
# How long one BRPOP of a worker's queues blocks. A queue the worker resumes reading
# (its batch share freed a slot) joins the *next* BRPOP, so a long one leaves freed
# slots empty for up to a whole timeout (kombu's default is 1 s) each time its batch
# slots empty together, which a batch of short jobs does often. Ten empty polls a
# second per idle worker cost Redis nothing.
# While one of its queues is paused a worker polls faster still
# (``workers.consumer_step.PAUSED_POLL_S``).
BRPOP_TIMEOUT_S = 0.1


def celery_config(*, broker_url: str, visibility_timeout_s: int) -> dict[str, Any]:
    """Celery settings that producers and workers must agree on.

    JSON only (never pickle). Queues are read in the listed order rather than round
    robin, so a worker drains its interactive queue before its batch queue. A
    ``sentinel://`` URL loses its query here; the master name moves to the transport
    options, where kombu looks for it.
    """
    return {
        "broker_url": celery_broker_url(broker_url),
        "task_serializer": "json",
        "accept_content": ["json"],
        "result_backend": None,
        "task_ignore_result": True,
        "task_acks_late": True,
        "task_reject_on_worker_lost": True,
        "worker_prefetch_multiplier": 1,
        "broker_connection_retry_on_startup": True,
        "broker_transport_options": {
            "visibility_timeout": visibility_timeout_s,
            "queue_order_strategy": "priority",
            # kombu's Redis transport takes its BRPOP timeout from polling_interval.
            "polling_interval": BRPOP_TIMEOUT_S,
            **sentinel_transport_options(broker_url),
        },
        "task_default_queue": queue_name(Tier.SMALL, Priority.INTERACTIVE),
        "task_create_missing_queues": True,
        "worker_hijack_root_logger": False,
    }
