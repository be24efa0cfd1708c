"""Timeouts and intervals an operator may tune: ``Settings.timeouts``.

Set them as one JSON object in ``LLMQ_TIMEOUTS`` (the way ``LLMQ_TIERS`` sets the tier
table); a field left out keeps its default, and the defaults are what llmq ran with
before they were settings. Waits that belong to a protocol or an algorithm (a poll
inside a scheduler step, a retry policy copied from redis-py, a limit counted per
minute) stay module constants next to the code that uses them, each saying why.
"""

from __future__ import annotations

from typing import Annotated

from pydantic import BaseModel, ConfigDict, Field, model_validator

Delays = tuple[Annotated[float, Field(ge=0)], ...]


class Timeouts(BaseModel):
    """How long llmq waits, and how often it looks, where a deployment may differ."""

    model_config = ConfigDict(extra="forbid", frozen=True, use_attribute_docstrings=True)

    # A worker's liveness, and the reaper that recovers a dead worker's jobs.
    heartbeat_s: float = Field(default=1.0, gt=0, le=60)
    """A worker rewrites its registry entry (load, held jobs, warm or not) this often."""
    registry_expiry_s: int = Field(default=3, ge=1, le=600)
    """A worker's registry entry lapses this long after its last heartbeat."""
    reaper_interval_s: float = Field(default=1.0, gt=0, le=600)
    """Each worker's reaper looks for dead workers' jobs and overdue jobs this often."""
    reaper_missing_grace_s: float = Field(default=2.0, ge=0)
    """A worker missing from the registry this long is dead: its jobs and messages requeue."""
    reaper_unheld_grace_s: float = Field(default=30.0, ge=0)
    """A running job its live worker stopped reporting as held is recovered after this."""
    lost_message_age_s: float = Field(default=10.0, ge=0)
    """A queued job this old with no message on any queue or worker is sent again."""
    lost_message_sweep_s: float = Field(default=60.0, ge=1)
    """The reaper looks for queued jobs that lost their message this often."""

    # Outages of Redis and the database.
    publish_retry_delays_s: Delays = (0.1, 0.25, 0.5, 1.0, 2.0, 2.0, 4.0, 4.0, 8.0, 8.0)
    """Waits between tries to publish a job's events while Redis is away; then it fails."""
    db_retry_delays_s: Delays = (0.2, 0.5, 1.0, 2.0, 5.0, 5.0, 10.0, 10.0, 15.0, 15.0)
    """Waits between tries to write a job's end while the database is away; then deferred."""
    deferred_write_retry_s: float = Field(default=5.0, gt=0, le=3600)
    """A job's end the database refused through every retry is tried again this often."""
    db_retry_countdown_s: float = Field(default=2.0, ge=0, le=3600)
    """A job whose claim found the database away is retried by Celery after this long."""
    stream_reconnect_s: float = Field(default=30.0, ge=0)
    """A stream's reader rides out a Redis outage this long, then raises BrokerUnavailable."""

    # Starting and keeping workers.
    engine_start_s: float = Field(default=900.0, gt=0)
    """A worker's engine loads its model within this long, or the worker fails to start."""
    worker_warm_s: float = Field(default=900.0, gt=0)
    """llmq up and the quality gate wait this long for a worker they started to be warm."""
    prompt_check_s: float = Field(default=10.0, gt=0, le=3600)
    """A warm worker looks for new or evicted registered prompts this often, to prefill them."""
    summary_night_s: float = Field(default=6 * 3600.0, gt=0)
    """A nightly summary run stops after this long; a later run resumes what it left."""

    # The producer and the gateway.
    slow_submit_log_s: float = Field(default=0.5, ge=0)
    """A submit slower than this is logged with where its time went."""
    gateway_result_s: float = Field(default=600.0, gt=0)
    """The gateway waits this long at most for a job's answer, streamed or whole."""
    key_cache_s: float = Field(default=10.0, ge=0)
    """A gateway trusts a checked API key this long: a revoked key is refused within it."""
    sse_keepalive_s: float = Field(default=15.0, gt=0)
    """A gateway stream with no event yet sends an SSE comment after this long of silence."""
    batch_sweep_s: float = Field(default=2.0, gt=0, le=3600)
    """A gateway looks for batches to feed, and refreshes running ones, this often."""
    batch_turn_s: float = Field(default=60.0, gt=0)
    """With more keys' batches waiting than feeders, a feeder yields its batch after this."""
    file_sweep_s: float = Field(default=600.0, gt=0)
    """A gateway deletes batch files past their retention this often."""

    @model_validator(mode="after")
    def _entries_outlive_heartbeats(self) -> Timeouts:
        if self.registry_expiry_s <= self.heartbeat_s:
            raise ValueError(
                "registry_expiry_s must be longer than heartbeat_s, or live workers "
                "vanish from the registry between their heartbeats"
            )
        return self


DEFAULT_TIMEOUTS = Timeouts()
"""The defaults, for function parameters that take one of these when no settings do."""
