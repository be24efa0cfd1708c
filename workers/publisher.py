"""Publishing a job's stream events: pub/sub for live readers, a list for late ones."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import redis

from schemas.events import (
    AttemptEvent,
    FinalEvent,
    JobOutcome,
    TokenEvent,
    TokenLogprob,
    error_event,
    parse_event,
)
from schemas.jobs import JobStatus
from schemas.stream_log import EventLog
from workers.append_combiner import AppendCombiner


@dataclass
class StreamedChoice:
    """One choice's text as streamed so far, and why it ended (None: it goes on)."""

    text: str = ""
    finish_reason: str | None = None


class StreamPublisher:
    """Numbers a job's events and publishes each to the log, then to pub/sub.

    The list index of an event equals its sequence number, which is what lets a
    reader replay from any point. Events go through ``combiner`` (the worker's jobs
    share one: one round trip for the next event of every job publishing at that
    moment), or through one of the publisher's own (one round trip each). Every
    payload is also kept here, so a log that a Redis restart emptied is written again
    in full. Only one attempt of a job publishes at a time (the claim sees to that).
    """

    def __init__(
        self,
        client: redis.Redis,
        job_id: str,
        *,
        ttl_s: int,
        combiner: AppendCombiner | None = None,
    ) -> None:
        self._log = EventLog(client, job_id, ttl_s=ttl_s)
        self._combiner = combiner or AppendCombiner(client)
        self._sent: list[str] = []

    @property
    def seq(self) -> int:
        """Sequence number of the next event."""
        return len(self._sent)

    def adopt(self) -> None:
        """Continue the log an earlier attempt left, numbering new events after it."""
        self._sent = self._log.entries()

    def resume(self, attempt: int) -> str:
        """Take over the log of earlier runs; return the text they already streamed.

        Appends an ``attempt`` event, so readers know a new run goes on from there;
        none where a first attempt finds nothing streamed (it simply starts).
        """
        self.adopt()
        streamed = "".join(
            event.text
            for event in (parse_event(raw) for raw in self._sent)
            if isinstance(event, TokenEvent)
        )
        if streamed or attempt > 1:
            event = AttemptEvent(seq=self.seq, attempt=attempt, resumed_chars=len(streamed))
            self._emit(event.model_dump_json())
        return streamed

    def token(
        self,
        text: str,
        logprobs: Sequence[TokenLogprob] = (),
        *,
        index: int = 0,
        finish_reason: str | None = None,
    ) -> None:
        """Publish one chunk of generated text, with its tokens' log probabilities
        where the request asked for them; ``index`` and ``finish_reason`` (on its last
        chunk) for a choice of a request of several."""
        event = TokenEvent(
            seq=self.seq,
            text=text,
            logprobs=list(logprobs) or None,
            index=index,
            finish_reason=finish_reason,
        )
        self._emit(event.model_dump_json())

    def streamed_choices(self, n: int) -> list[StreamedChoice]:
        """What earlier attempts (the log taken over) streamed of each of ``n`` choices."""
        choices = [StreamedChoice() for _ in range(n)]
        for event in (parse_event(raw) for raw in self._sent):
            if isinstance(event, TokenEvent) and event.index < n:
                choice = choices[event.index]
                choice.text += event.text
                choice.finish_reason = event.finish_reason or choice.finish_reason
        return choices

    def logprobs_by_choice(self, n: int) -> list[list[TokenLogprob]]:
        """Each of ``n`` choices' tokens with their log probabilities, in order, as
        every attempt streamed them (a resumed answer's earlier tokens included)."""
        choices: list[list[TokenLogprob]] = [[] for _ in range(n)]
        for event in (parse_event(raw) for raw in self._sent):
            if isinstance(event, TokenEvent) and event.logprobs and event.index < n:
                choices[event.index].extend(event.logprobs)
        return choices

    def final(self, result: JobOutcome, *, worker_id: str) -> None:
        """Publish the terminal success event (with every choice, for a request of
        several)."""
        # The event is the outcome, numbered and signed by the worker.
        event = FinalEvent(seq=self.seq, worker_id=worker_id, **vars(result))
        self._emit(event.model_dump_json())

    def error(self, message: str, status: JobStatus = JobStatus.FAILED) -> None:
        """Publish the terminal event of a job that ended without an answer."""
        self._emit(error_event(self.seq, message, status).model_dump_json())

    def _emit(self, payload: str) -> None:
        self._sent.append(payload)
        self._combiner.append(self._log, self._sent)
