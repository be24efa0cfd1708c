"""A job's message on its queue, in Celery's own protocol (version 2, JSON).

Producers write it with one Redis command instead of going through Celery's publish
path (and its work on every submit); workers, Flower and the
envelope check see exactly what Celery's ``send_task`` would have sent.
"""

from __future__ import annotations

import base64
import json
import os
import socket
import uuid
from dataclasses import dataclass
from typing import Any

from schemas.queues import GENERATE_TASK, Priority, Tier, queue_name

_ORIGIN = f"gen{os.getpid()}@{socket.gethostname()}"
# A job message carries no callbacks, errbacks, chain or chord.
_EMBED = {"callbacks": None, "errbacks": None, "chain": None, "chord": None}


# Not a setting: a contract between producer and worker (both must agree), tied to
# SQLite's busy timeout.
ROW_WAIT_S = 30.0
"""How long a worker waits for the row of a message that carries its request, which
a producer pushes before it writes the row: SQLite's busy timeout, the longest a
healthy insert waits for its lock. A producer whose insert took over half of it sends
the job's message again, without the copy, so that a row written after a worker gave
up still has a message (the reaper's sweep would find it only a minute later)."""

# A request copied into its message lets the worker start the engine before the claim;
# past this size the copy costs more (in Redis, on every scan of the queues) than the
# claim's round trip it hides.
MAX_REQUEST_COPY_BYTES = 8192


@dataclass(frozen=True)
class JobMessage:
    """A job's message, ready to push on its queue."""

    job_id: str
    queue: str
    text: str
    carries_request: bool
    """Whether it carries the job's request (``job_hint``): a worker then waits briefly
    for a row that is not written yet, so such a message may be sent before its row."""


def celery_job_message(
    job_id: str, tier: Tier, priority: Priority, *, request: dict[str, Any] | None = None
) -> JobMessage:
    """The message ``send_task(GENERATE_TASK, args=[job_id], task_id=job_id)`` would send
    to the job's queue, serialized as kombu's Redis transport stores it.

    With ``request`` (the job's stored request) and room for it, the message also
    carries ``kwargs`` ``{"request": ..., "priority": ...}``: the worker may start
    generating from them while it claims the row, which stays the truth.
    """
    queue = queue_name(tier, priority)
    kwargs = job_hint(request, priority)
    body = json.dumps([[job_id], kwargs, _EMBED]).encode()
    if len(body) > MAX_REQUEST_COPY_BYTES:
        kwargs = {}
        body = json.dumps([[job_id], kwargs, _EMBED]).encode()
    message = {
        "body": base64.b64encode(body).decode(),
        "content-encoding": "utf-8",
        "content-type": "application/json",
        "headers": {
            "lang": "py",
            "task": GENERATE_TASK,
            "id": job_id,
            "shadow": None,
            "eta": None,
            "expires": None,
            "group": None,
            "group_index": None,
            "retries": 0,
            "timelimit": [None, None],
            "root_id": job_id,
            "parent_id": None,
            "argsrepr": repr([job_id]),
            "kwargsrepr": "{...}" if kwargs else "{}",
            "origin": _ORIGIN,
            "ignore_result": None,
            "replaced_task_nesting": 0,
            "stamped_headers": None,
            "stamps": {},
        },
        "properties": {
            "correlation_id": job_id,
            "reply_to": str(uuid.uuid4()),
            "delivery_mode": 2,
            "delivery_info": {"exchange": "", "routing_key": queue},
            "priority": 0,
            "body_encoding": "base64",
            "delivery_tag": str(uuid.uuid4()),
        },
    }
    return JobMessage(
        job_id=job_id, queue=queue, text=json.dumps(message), carries_request=bool(kwargs)
    )


def job_hint(request: dict[str, Any] | None, priority: Priority) -> dict[str, Any]:
    """The message's copy of a job, or nothing: interactive jobs only, where the first
    token waits on it."""
    if request is None or priority != Priority.INTERACTIVE:
        return {}
    return {"request": request, "priority": priority.value}


def message_job_id(message: Any) -> str | None:
    """The job id a parsed queue entry names (its Celery task id, which llmq sets to
    the job id), or None for anything else."""
    headers = message.get("headers") if isinstance(message, dict) else None
    job_id = headers.get("id") if isinstance(headers, dict) else None
    return job_id if isinstance(job_id, str) else None
