"""Starting a job's generation from its message, while its row is being claimed.

The claim (one SQL round trip) would otherwise sit between the message and the
engine, on the way to the first token. An interactive job's message carries a copy of
its request (``schemas.messages``), so the worker renders the prompt and submits it to
the engine at once, then claims the row while the engine computes. Nothing is
published before the claim succeeds; the row stays the truth: if the claim fails (a
duplicate message, a cancelled job) or the row's request is not the message's copy,
or the job is on a later attempt (which resumes what earlier ones streamed), the
early request is aborted and the job takes the ordinary path.
"""

from __future__ import annotations

import itertools
import time

from schemas.errors import LlmqError
from schemas.queues import Priority
from workers.engine.base import EngineRequest
from workers.job_input import check_context, parse_request, prompt_ids, sampling_options
from workers.received_starts import EarlyStart, JobHint
from workers.running_jobs import RunningJob
from workers.scheduler_driver import handing_over
from workers.worker_runtime import WorkerRuntime

# Engine request ids must be unique among live requests: a duplicate message of the
# same job on this worker gets its own early request (aborted when its claim fails).
_EARLY_IDS = itertools.count()


def start_early(runtime: WorkerRuntime, job_id: str, hint: JobHint | None) -> EarlyStart | None:
    """Submit the job to the engine from its message; None when the message carries no
    request, or one the ordinary path must judge (it records the error on the row)."""
    if hint is None:
        return None
    started_at = time.monotonic()
    try:
        request = parse_request(hint.request)
        if request.n > 1:
            return None  # its choices start together after the claim (workers.choices)
        prompt = prompt_ids(request, runtime)
        check_context(len(prompt), request.max_tokens, runtime)
    except LlmqError:
        return None
    running = RunningJob()
    ticket = (
        runtime.scheduling.interactive_ticket() if hint.priority == Priority.INTERACTIVE else None
    )
    with handing_over(ticket):
        deltas = runtime.engine.stream(
            EngineRequest(
                prompt,
                sampling_options(request, hint.priority),
                f"{job_id}-early{next(_EARLY_IDS)}",
            ),
            stop=running.stop,
        )
    return EarlyStart(hint, request, prompt, running, deltas, started_at, ticket)


def start_on_receipt(runtime: WorkerRuntime, job_id: str, hint: JobHint) -> None:
    """Start the job's engine request as its message is received, for its task to take
    (``run_job``); nothing happens when the message's copy is not one to start from."""
    early = start_early(runtime, job_id, hint)
    if early is not None:
        runtime.received.put(job_id, early)
