"""The contract between a worker's job runner and its inference engine."""

from __future__ import annotations

import threading
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from schemas.events import TokenLogprob
from schemas.sampling import Sampling


@dataclass(frozen=True)
class SamplingOptions:
    """Sampling knobs a job passes through to the engine."""

    max_tokens: int
    temperature: float = 0.7
    top_p: float = 1.0
    stop: Sequence[str] = field(default_factory=tuple)
    seed: int | None = None
    stream_tokens: bool = True
    """False: the engine hands over one empty delta at the first token (the prompt is
    through prefill) and then the whole text at the end, which spares the worker
    per-token work (batch jobs, for which nobody waits token by token)."""
    priority: int = 0
    """Lower is scheduled first (with the tier's ``scheduling_policy`` "priority"): a
    waiting interactive request (0) is admitted into the running batch before waiting
    batch work and prefills (1), and batch sequences are preempted first when the KV
    cache runs short."""
    sampling: Sampling | None = None
    """The request's further options (penalties, vLLM's extras, structured output)."""


INTERACTIVE_PRIORITY = 0
BACKGROUND_PRIORITY = 1


@dataclass(frozen=True)
class Delta:
    """New text since the previous delta of one request."""

    text: str
    completion_tokens: int
    finished: bool
    finish_reason: str | None = None
    cached_tokens: int | None = None
    """Prompt tokens the engine took from its prefix cache (known from the first delta)."""
    logprobs: tuple[TokenLogprob, ...] = ()
    """The new tokens' log probabilities, where the request asked for them."""


@dataclass(frozen=True)
class EngineRequest:
    """One generation to run: the prompt's token ids, how to sample them, and the id
    the engine knows the request by (unique among those in flight)."""

    prompt_token_ids: list[int]
    options: SamplingOptions
    request_id: str


class DeltaStream(Protocol):
    """One request's deltas, in order; ``close`` aborts the request in the engine."""

    def __iter__(self) -> Iterator[Delta]: ...

    def __next__(self) -> Delta: ...

    def close(self) -> None: ...

    def held(self) -> Delta | None:
        """What an answer that goes out in one piece (``stream_tokens`` False) has
        generated and not handed over yet, as one unfinished delta; None when nothing
        is held (a streamed answer, or one already handed over whole). Read after a
        stop, it is the text a resumed run can go on from."""
        ...


class Engine(Protocol):
    """A started, thread-safe engine: many threads may stream from it at once."""

    @property
    def max_model_len(self) -> int:
        """Context window in tokens (prompt plus output)."""
        ...

    def render_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        """Token ids of ``messages`` in the model's chat format, ready for generation."""
        ...

    def render_chat_with_tools(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int] | None:
        """Token ids of ``messages`` with ``tools`` (OpenAI's tool objects) through the
        model's chat template, as vLLM's server renders them; None where the template
        has no tools section (the caller then writes them out as text)."""
        ...

    def render_prompt(self, text: str) -> list[int]:
        """Token ids of a text prompt as a text-completion server encodes it: the
        tokenizer's special tokens (a BOS, where the model has one), no chat format."""
        ...

    def encode(self, text: str) -> list[int]:
        """Token ids of plain ``text`` (no chat format, no special tokens)."""
        ...

    def stream(self, request: EngineRequest, *, stop: threading.Event | None = None) -> DeltaStream:
        """Generate for ``request``, yielding deltas until the last has ``finished``.

        The request is submitted when ``stream`` is called, before the first ``next``.

        Closing the iterator early, or setting ``stop``, aborts the request in the
        engine and frees its slot; after ``stop`` the iterator simply ends.
        Raises ``EngineError`` if the engine fails.
        """
        ...

    def in_flight(self) -> int:
        """Requests currently inside the engine (running or waiting for a batch slot)."""
        ...

    def shutdown(self) -> None:
        """Stop the engine and free its memory; idempotent."""
        ...
