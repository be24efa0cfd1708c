"""What a job message on a tier queue must look like before Celery may see it.

A queue is a plain Redis list that anything with access can push to, and Celery
trusts what it pops: an odd delivery tag stops the worker, an odd body leaves the
message unacknowledged, holding a slot for good. So every entry is checked against
the one shape llmq's producers publish (Celery protocol 2, JSON, base64 body, one
``llmq.generate`` task) and anything else is dropped at the door.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from schemas.jobs import could_be_job_id
from schemas.queues import GENERATE_TASK, parse_queue_name


class _Headers(BaseModel):
    """The headers Celery acts on, with the types its worker can act on.

    A header of the wrong type does not fail where Celery reads the message: it fails
    when the task is handed to the pool, and the message then holds a prefetch slot
    for ever; a few of those and the worker reads nothing more.
    """

    model_config = ConfigDict(extra="allow", strict=True)

    task: Literal["llmq.generate"]
    id: str = Field(min_length=1, max_length=200)
    eta: str | None = None  # set on a retry's message (the database was away)
    expires: str | None = None
    lang: str | None = None
    shadow: str | None = None
    group: str | None = None
    group_index: int | None = None
    retries: int = Field(default=0, ge=0)
    timelimit: tuple[float | None, float | None] | None = None
    root_id: str | None = None
    parent_id: str | None = None
    argsrepr: str | None = None
    kwargsrepr: str | None = None
    origin: str | None = None
    ignore_result: bool | None = None
    replaced_task_nesting: int = Field(default=0, ge=0)
    stamped_headers: list[str] | None = None
    stamps: dict[str, Any] | None = None

    @field_validator("timelimit", mode="before")
    @classmethod
    def _json_pair(cls, value: Any) -> Any:
        # JSON has no tuples: a pair arrives as a list.
        return tuple(value) if isinstance(value, list) else value

    @field_validator("eta", "expires")
    @classmethod
    def _iso_time(cls, value: str | None) -> str | None:
        if value is not None:
            moment = datetime.fromisoformat(value)
            if moment.tzinfo is None:
                moment = moment.replace(tzinfo=UTC)
            if moment > datetime.now(UTC) + MAX_SCHEDULE_AHEAD:
                raise ValueError("job messages are never scheduled that far ahead")
        return value


# llmq schedules a message only to retry a claim a few seconds later.
MAX_SCHEDULE_AHEAD = timedelta(minutes=5)


class _Properties(BaseModel):
    model_config = ConfigDict(extra="allow")

    delivery_tag: str = Field(min_length=1, max_length=200)
    body_encoding: Literal["base64"]
    delivery_info: dict[str, Any]


class _Envelope(BaseModel):
    model_config = ConfigDict(extra="allow", populate_by_name=True)

    body: str = Field(max_length=64_000)
    content_type: Literal["application/json"] = Field(alias="content-type")
    content_encoding: Literal["utf-8"] = Field(alias="content-encoding")
    headers: _Headers
    properties: _Properties


class _Embed(BaseModel):
    """Celery's callbacks and chains: a job message never carries any."""

    model_config = ConfigDict(extra="forbid")

    callbacks: None = None
    errbacks: None = None
    chain: None = None
    chord: None = None


def is_job_queue(queue: str) -> bool:
    """True for the ``llm.<tier>.<priority>`` queues that carry job messages."""
    try:
        parse_queue_name(queue)
    except ValueError:
        return False
    return True


@dataclass(frozen=True)
class ReceivedJobMessage:
    """What a well-formed job message says, as its worker receives it."""

    job_id: str
    kwargs: dict[str, Any]
    """Empty, or the copy of the job's request and priority (``schemas.messages``)."""
    eta: str | None
    """Set on a retry's message, which waits for it."""


class MalformedMessage(ValueError):
    """A queue entry that is not a job message; its text says what is wrong."""


def read_job_message(message: Any) -> ReceivedJobMessage:
    """The job a queue entry carries; raises ``MalformedMessage`` naming the problem."""
    try:
        envelope = _Envelope.model_validate(message)
        body = json.loads(base64.b64decode(envelope.body, validate=True))
    except ValidationError as exc:
        raise MalformedMessage(f"not a job message ({exc.error_count()} problem(s))") from None
    except (binascii.Error, ValueError, RecursionError):
        raise MalformedMessage("its body is not base64-encoded JSON") from None
    problem = _body_problem(body)
    if problem is not None:
        raise MalformedMessage(problem)
    return ReceivedJobMessage(job_id=body[0][0], kwargs=body[1], eta=envelope.headers.eta)


def envelope_problem(message: Any) -> str | None:
    """None if ``message`` is a well-formed job message; else what is wrong with it."""
    try:
        read_job_message(message)
    except MalformedMessage as exc:
        return str(exc)
    return None


def _body_problem(body: Any) -> str | None:
    if not (isinstance(body, list) and len(body) == 3):
        return "its body is not [args, kwargs, embed]"
    args, kwargs, embed = body
    if not isinstance(args, list) or not isinstance(kwargs, dict):
        return f"{GENERATE_TASK} takes one positional job id"
    if kwargs and not _is_job_hint(kwargs):
        return f"{GENERATE_TASK} takes no keywords but the job's request and priority"
    if len(args) != 1 or not could_be_job_id(args[0]):
        # The claim would fail on it, and a database error is retried without end.
        return "its job id is not one any job can have"
    try:
        _Embed.model_validate(embed)
    except ValidationError:
        return "it carries callbacks or chains"
    return None


def _is_job_hint(kwargs: dict[str, Any]) -> bool:
    # The copy of the job a producer may add (``schemas.messages.job_hint``); its
    # content is checked by the worker against the row before any of it is used.
    return (
        set(kwargs) == {"request", "priority"}
        and isinstance(kwargs["request"], dict)
        and isinstance(kwargs["priority"], str)
    )
