"""Several choices (``n``) in one job: one engine request per choice, read side by side.

vLLM's own ``n`` fans a request out inside the engine, and with request priorities that
has crashed it (vLLM issue #29747); separate requests are what the engine serves every
day, and they batch together as any others do. Each choice streams under its index;
its last token event carries its finish reason, so a later attempt (after a lost
worker) goes on with exactly the choices that had not ended, each from its own text.
"""

from __future__ import annotations

import dataclasses
import queue
import threading
import time
from collections.abc import Iterator

from schemas.errors import LlmqError
from schemas.events import ChoiceOutput
from schemas.queues import Priority
from schemas.requests import GenerationRequest
from workers.engine.base import Delta, DeltaStream, EngineRequest, SamplingOptions
from workers.job_input import check_context, prompt_ids, sampling_options
from workers.jobs import ClaimedJob
from workers.publisher import StreamPublisher
from workers.running_jobs import RunningJob
from workers.scheduler_driver import Ticket, handing_over
from workers.worker_runtime import WorkerRuntime

# Not settings (the stop poll and the join): inner waits of one job's threads, bounded
# by the job's own deadline.
# How often the reader looks at the job's own stop (cancel, deadline, yield) while it
# waits for the next delta of any choice.
STOP_POLL_S = 0.1
# How long a finished job waits for its choices' readers to let go of their requests.
JOIN_S = 5.0
SEED_RANGE = 2**64

_Item = tuple[int, Delta | BaseException | None]


@dataclasses.dataclass
class ChoicesOutcome:
    """What came out of the engine for every choice (after what earlier attempts streamed)."""

    choices: list[ChoiceOutput]
    prompt_tokens: int
    cached_prompt_tokens: int = 0
    completion_tokens: int = 0
    ttft_ms: float | None = None
    engine_ttft_ms: float | None = None

    @property
    def finish_reason(self) -> str | None:
        """The first choice's, once every choice has ended; None while any goes on."""
        if any(choice.finish_reason is None for choice in self.choices):
            return None
        return self.choices[0].finish_reason


def generate_choices(
    runtime: WorkerRuntime,
    claimed: ClaimedJob,
    publisher: StreamPublisher,
    running: RunningJob,
    request: GenerationRequest,
) -> ChoicesOutcome:
    """Stream ``request.n`` choices of the claimed job, each from what earlier attempts
    streamed of it; raises ``LlmqError`` (``EngineError``) as a job of one choice does.

    A choice with a ``seed`` samples with ``seed + index``, as vLLM's own ``n`` does, so
    the choices differ and each repeats.
    """
    run = _ChoiceRun(runtime, claimed, publisher, running, time.monotonic())
    so_far = publisher.streamed_choices(request.n)
    structured = request.sampling is not None and request.sampling.structured is not None
    if structured and any(choice.text for choice in so_far):
        raise LlmqError(
            "the worker was lost mid-answer and a structured answer cannot go on from "
            "part of it; send the request again"
        )
    prompt = prompt_ids(request, runtime)
    check_context(len(prompt), request.max_tokens, runtime)
    run.outcome.prompt_tokens = len(prompt)
    run.texts = [choice.text for choice in so_far]
    run.reasons = [choice.finish_reason for choice in so_far]
    run.tokens = [0] * request.n
    plans: dict[int, tuple[list[int], SamplingOptions]] = {}
    for index, choice in enumerate(so_far):
        resumed_ids = runtime.engine.encode(choice.text) if choice.text else []
        run.tokens[index] = len(resumed_ids)  # streamed by earlier attempts: they count
        if choice.finish_reason is not None:
            continue
        if len(resumed_ids) >= request.max_tokens:
            run.reasons[index] = "length"
            continue
        options = sampling_options(request, claimed.priority, done_tokens=len(resumed_ids))
        if request.seed is not None:
            options = dataclasses.replace(options, seed=(request.seed + index) % SEED_RANGE)
        plans[index] = (prompt + resumed_ids, options)
    if plans:
        run.stream_all(plans)
    outcome = run.outcome
    outcome.completion_tokens = sum(run.tokens)
    outcome.choices = [
        ChoiceOutput(index=index, text=run.texts[index], finish_reason=run.reasons[index])
        for index in range(request.n)
    ]
    return outcome


@dataclasses.dataclass(eq=False)
class _ChoiceRun:
    """One job's choices in the engine, and each one's text, end and tokens so far."""

    runtime: WorkerRuntime
    claimed: ClaimedJob
    publisher: StreamPublisher
    running: RunningJob
    started_at: float
    outcome: ChoicesOutcome = dataclasses.field(
        default_factory=lambda: ChoicesOutcome(choices=[], prompt_tokens=0)
    )
    texts: list[str] = dataclasses.field(default_factory=list)
    reasons: list[str | None] = dataclasses.field(default_factory=list)
    tokens: list[int] = dataclasses.field(default_factory=list)

    def stream_all(self, plans: dict[int, tuple[list[int], SamplingOptions]]) -> None:
        """Submit every planned choice, then publish their deltas as they come, from
        this thread alone (a reader thread per choice only hands its deltas over)."""
        ticket = self._ticket()
        merged: queue.SimpleQueue[_Item] = queue.SimpleQueue()
        stops = {index: threading.Event() for index in plans}
        readers: list[threading.Thread] = []
        done_before = list(self.tokens)
        try:
            with handing_over(ticket):
                for index, (prompt, options) in plans.items():
                    request_id = f"{self.claimed.id}-{self.claimed.attempt}-c{index}"
                    deltas = self.runtime.engine.stream(
                        EngineRequest(prompt, options, request_id), stop=stops[index]
                    )
                    reader = threading.Thread(
                        target=_read, args=(index, deltas, merged), daemon=True
                    )
                    reader.start()
                    readers.append(reader)
            for index, delta in self._deltas(merged, len(readers), stops):
                ticket.give_back()  # a first delta: the prompt is through prefill
                self._publish(index, delta)
                self.texts[index] += delta.text
                self.tokens[index] = done_before[index] + delta.completion_tokens
                if delta.finished:
                    self.reasons[index] = delta.finish_reason or "stop"
        finally:
            for stop in stops.values():
                stop.set()
            for reader in readers:
                reader.join(JOIN_S)
            ticket.give_back()

    def _ticket(self) -> Ticket:
        """An interactive job's first-token ticket, a batch job's prefill place."""
        if self.claimed.priority == Priority.INTERACTIVE:
            return self.runtime.scheduling.interactive_ticket()
        # The wait is the worker's scheduling, not the engine's: left out of started_at.
        waited_from = time.monotonic()
        ticket = self.runtime.scheduling.batch_ticket()
        self.started_at += time.monotonic() - waited_from
        return ticket

    def _deltas(
        self,
        merged: queue.SimpleQueue[_Item],
        readers: int,
        stops: dict[int, threading.Event],
    ) -> Iterator[tuple[int, Delta]]:
        """Every choice's deltas until each reader is done; a reader's error is raised.
        The job's own stop (cancel, deadline, yield) stops every choice."""
        while readers:
            if self.running.stop.is_set():
                for stop in stops.values():
                    stop.set()
            try:
                index, item = merged.get(timeout=STOP_POLL_S)
            except queue.Empty:
                continue
            if item is None:
                readers -= 1
            elif isinstance(item, BaseException):
                raise item
            else:
                yield index, item

    def _publish(self, index: int, delta: Delta) -> None:
        outcome = self.outcome
        if delta.text and outcome.ttft_ms is None:
            now = time.monotonic()
            since_claim_s = now - self.claimed.claimed_monotonic
            outcome.ttft_ms = self.claimed.queue_wait_ms + since_claim_s * 1000.0
            outcome.engine_ttft_ms = (now - self.started_at) * 1000.0
            if self.claimed.priority == Priority.INTERACTIVE:
                self.runtime.interactive_first_token(outcome.ttft_ms / 1000.0)
        if delta.cached_tokens is not None and not outcome.cached_prompt_tokens:
            outcome.cached_prompt_tokens = delta.cached_tokens
        if delta.text or delta.logprobs or delta.finished:
            reason = (delta.finish_reason or "stop") if delta.finished else None
            self.publisher.token(delta.text, delta.logprobs, index=index, finish_reason=reason)


def _read(index: int, deltas: DeltaStream, merged: queue.SimpleQueue[_Item]) -> None:
    """Hand one choice's deltas to the job's thread, then None. Runs in a thread of its
    own, which alone reads and closes the choice's request."""
    try:
        for delta in deltas:
            merged.put((index, delta))
    except BaseException as exc:  # noqa: BLE001 - handed to the job's thread, which raises
        merged.put((index, exc))
    finally:
        deltas.close()
        merged.put((index, None))
