"""Stream events a worker publishes for a job, in sequence-number order.

Every job's stream is zero or more ``token`` events followed by exactly one
terminal event (``final`` or ``error``). Sequence numbers start at 0 and have no gaps.
When a worker dies mid-job, the next attempt appends an ``attempt`` event and goes on
from the text already streamed, so the tokens still add up to one coherent text.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Annotated, Literal

from pydantic import BaseModel, ConfigDict, Field, TypeAdapter
from typing_extensions import TypeIs


class Usage(BaseModel):
    """Token counts of a finished job."""

    model_config = ConfigDict(frozen=True)

    prompt_tokens: int = Field(ge=0)
    completion_tokens: int = Field(ge=0)
    cached_prompt_tokens: int = Field(default=0, ge=0)


class Timings(BaseModel):
    """Where a job's time went, in milliseconds."""

    model_config = ConfigDict(frozen=True)

    queue_wait_ms: float = Field(ge=0)
    ttft_ms: float | None = Field(default=None, ge=0)
    total_ms: float = Field(ge=0)
    engine_ttft_ms: float | None = Field(default=None, ge=0)
    """From the worker starting on the request (rendering its prompt) to the engine's
    first text: what a caller of the engine in its own process would wait. A reader's
    time to first text less this is what the queue path put on the way (submit, queue,
    claim, publish, delivery). The first text is taken as the job reads it, after its
    claim: a claim that outlasted the engine's first token counts here, not there.
    Sent in the final event; not kept in the job's row."""


class TopLogprob(BaseModel):
    """One candidate for a position of the answer, and its log probability."""

    model_config = ConfigDict(frozen=True)

    token: str
    logprob: float
    bytes: list[int] | None = None
    """The token's UTF-8 bytes (a token may hold part of a character)."""


class TokenLogprob(TopLogprob):
    """A generated token's log probability, and its most likely alternatives."""

    top_logprobs: list[TopLogprob] = Field(default_factory=list)


class TokenEvent(BaseModel):
    """A chunk of generated text."""

    model_config = ConfigDict(frozen=True)

    type: Literal["token"] = "token"
    seq: int = Field(ge=0)
    text: str
    logprobs: list[TokenLogprob] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    """Each token of ``text`` with its log probability, for a request that asked for
    them (``Sampling.logprobs``); left out otherwise."""
    index: int = Field(default=0, ge=0, exclude_if=lambda value: value == 0)
    """Which choice the text belongs to, for a request of several (``n``); left out for
    the first, so a one-choice job's events are what they always were."""
    finish_reason: str | None = Field(default=None, exclude_if=lambda value: value is None)
    """Set on a choice's last token event, for a request of several choices: a later
    attempt goes on with the choices that had not finished."""


class AttemptEvent(BaseModel):
    """A new run of the job took over: a later attempt (its worker was lost), or the
    same attempt of a batch job that gave way. It continues after ``resumed_chars`` of
    text."""

    model_config = ConfigDict(frozen=True)

    type: Literal["attempt"] = "attempt"
    seq: int = Field(ge=0)
    attempt: int = Field(ge=1)
    resumed_chars: int = Field(ge=0)


class ChoiceOutput(BaseModel):
    """One choice of a request for several (``n``): its whole text and why it ended."""

    model_config = ConfigDict(frozen=True)

    index: int = Field(ge=0)
    text: str
    finish_reason: str | None = None
    logprobs: list[TokenLogprob] | None = Field(
        default=None, exclude_if=lambda value: value is None
    )
    """Its tokens' log probabilities, where asked for: gathered from its token events by
    a reader, never sent in the final event."""


@dataclass(frozen=True)
class JobOutcome:
    """What a finished job produced, as its row records it and its final event
    (:class:`FinalEvent`, which adds its number and worker) tells readers.
    ``choices``: every choice of a job that asked for several (``text`` and
    ``finish_reason`` are then the first one's)."""

    text: str
    finish_reason: str | None
    usage: Usage
    timings: Timings
    choices: Sequence[ChoiceOutput] | None = None


class FinalEvent(BaseModel):
    """The job finished; ``text`` is the whole output."""

    model_config = ConfigDict(frozen=True)

    type: Literal["final"] = "final"
    seq: int = Field(ge=0)
    text: str
    finish_reason: str | None = None
    usage: Usage
    timings: Timings
    worker_id: str
    choices: list[ChoiceOutput] | None = Field(default=None, exclude_if=lambda value: value is None)
    """Every choice, in order, for a request of several (``n``); ``text`` and
    ``finish_reason`` are then the first one's. Left out for one choice."""


class ErrorEvent(BaseModel):
    """The job ended without an answer; ``message`` says why in words a person can act
    on, ``status`` how it ended (the job row's final status; events written before it
    existed read as ``failed``)."""

    model_config = ConfigDict(frozen=True)

    type: Literal["error"] = "error"
    seq: int = Field(ge=0)
    message: str
    status: Literal["failed", "cancelled", "dead_letter", "expired"] = "failed"


def error_event(seq: int, message: str, status: str = "failed") -> ErrorEvent:
    """An :class:`ErrorEvent`; ``status`` is a final job status other than done
    (``JobStatus`` values are strings); raises ``pydantic.ValidationError`` otherwise."""
    return ErrorEvent.model_validate({"seq": seq, "message": message, "status": status})


AnyEvent = TokenEvent | AttemptEvent | FinalEvent | ErrorEvent
StreamEvent = Annotated[AnyEvent, Field(discriminator="type")]
TerminalEvent = FinalEvent | ErrorEvent

STREAM_EVENT = TypeAdapter[AnyEvent](StreamEvent)


def parse_event(raw: str | bytes) -> AnyEvent:
    """Decode one JSON stream event; raises ``pydantic.ValidationError`` if malformed."""
    return STREAM_EVENT.validate_json(raw)


def is_terminal(event: AnyEvent) -> TypeIs[TerminalEvent]:
    """True for the last event of a stream (a ``FinalEvent`` or an ``ErrorEvent``)."""
    return isinstance(event, TerminalEvent)
