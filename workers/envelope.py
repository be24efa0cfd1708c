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
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.queues import GENERATE_TASK, parse_queue_name


class _Headers(BaseModel):
    model_config = ConfigDict(extra="allow")

    task: Literal["llmq.generate"]
    id: str = Field(min_length=1, max_length=200)
    eta: str | None = None  # set on a retry's message (the database was away)
    expires: str | None = None


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


def envelope_problem(message: Any) -> str | None:
    """None if ``message`` is a well-formed job message; else what is wrong with it."""
    try:
        envelope = _Envelope.model_validate(message)
        body = json.loads(base64.b64decode(envelope.body, validate=True))
    except ValidationError as exc:
        return f"not a job message ({exc.error_count()} problem(s))"
    except (binascii.Error, ValueError, RecursionError):
        return "its body is not base64-encoded JSON"
    return _body_problem(body)


def _body_problem(body: Any) -> str | None:
    if not (isinstance(body, list) and len(body) == 3):
        return "its body is not [args, kwargs, embed]"
    args, kwargs, embed = body
    if not isinstance(args, list) or not isinstance(kwargs, dict) or kwargs:
        return f"{GENERATE_TASK} takes one positional job id"
    try:
        _Embed.model_validate(embed)
    except ValidationError:
        return "it carries callbacks or chains"
    return None
