"""An interactive stream's time between tokens, measured while it streams.

A request's mean time between tokens, known only once it finished, comes too late to
help it: by then its user waited through every slow token. So the stream is measured
in windows of a few tokens, each window's mean an observation against the inter-token
SLO as it closes: a share of batch that slows people's tokens is cut while they still
read, and the rest of their answer speeds up.
"""

from __future__ import annotations

from collections.abc import Callable

ITL_WINDOW_TOKENS = 8
"""Tokens per window. Not a setting: enough tokens that one long engine step (a batch
prompt's prefill beside the stream) does not read as the SLO at risk, few enough that
an answer of a few dozen tokens is observed several times while it streams."""


class InterTokenWindows:
    """Windows of ``tokens`` tokens of one stream; each closed window's mean time between
    tokens goes to ``observe`` (seconds). Used by the one thread that reads the stream.

    ``arrived`` is told of each delta (tokens may come several to a delta, when the
    reader fell behind); the first one opens the first window (the first token's own
    wait is the first-token SLO's). ``finished`` observes what is left of the last
    window when it holds at least half a window of tokens.
    """

    def __init__(self, observe: Callable[[float], None], *, tokens: int = ITL_WINDOW_TOKENS):
        if tokens < 2:
            raise ValueError("a window holds at least 2 tokens")
        self._observe = observe
        self._tokens = tokens
        self._opened_at: float | None = None
        self._opened_count = 0
        self._last_at = 0.0
        self._last_count = 0

    def arrived(self, now: float, completion_tokens: int) -> None:
        """A delta came at ``now`` (monotonic seconds); ``completion_tokens`` is the
        stream's count of tokens so far."""
        if completion_tokens <= self._last_count:
            return  # no token (a delta of log probabilities or a finish only)
        self._last_at, self._last_count = now, completion_tokens
        if self._opened_at is None:
            self._opened_at, self._opened_count = now, completion_tokens
            return
        if completion_tokens - self._opened_count >= self._tokens:
            self._close()

    def finished(self) -> None:
        """The stream ended: observe the last window if it holds enough tokens."""
        if self._opened_at is not None and 2 * (self._last_count - self._opened_count) >= (
            self._tokens
        ):
            self._close()

    def _close(self) -> None:
        assert self._opened_at is not None
        gaps = self._last_count - self._opened_count
        self._observe((self._last_at - self._opened_at) / gaps)
        self._opened_at, self._opened_count = self._last_at, self._last_count
