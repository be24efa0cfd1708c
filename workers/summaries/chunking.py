"""Splitting a conversation into pieces a summary step can take. Pure functions.

A conversation is rendered one turn per line ("USER: ...", "ASSISTANT: ..."). Turns
are never cut while they fit: chunks end on turn boundaries. Only a single turn that
is alone longer than the budget is cut, at word boundaries, so that nothing is lost.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

Counter = Callable[[str], int]

TURN_SEPARATOR = "\n"
PARTIAL_SEPARATOR = "\n\n"


def render_turn(role: str, content: str) -> str:
    """One turn as a transcript line."""
    return f"{role.upper()}: {content.strip()}"


def chunk_pieces(
    pieces: Sequence[str], *, budget: int, count: Counter, separator: str = TURN_SEPARATOR
) -> list[str]:
    """Join ``pieces`` in order into as few chunks as fit ``budget`` tokens each.

    Greedy and order-keeping: a chunk takes the next piece while the count of the
    joined text stays within ``budget``. A piece longer than ``budget`` on its own is
    cut at word boundaries into parts that fit. Raises ``ValueError`` for a budget
    below one token.
    """
    if budget < 1:
        raise ValueError(f"a chunk budget must be at least one token, not {budget}")
    chunks: list[str] = []
    current: list[str] = []
    for piece in pieces:
        for part in _fitting_parts(piece, budget, count):
            candidate = separator.join([*current, part])
            if current and count(candidate) > budget:
                chunks.append(separator.join(current))
                current = [part]
            else:
                current.append(part)
    if current:
        chunks.append(separator.join(current))
    return chunks


def _fitting_parts(piece: str, budget: int, count: Counter) -> list[str]:
    if count(piece) <= budget:
        return [piece]
    words = piece.split(" ")
    parts: list[str] = []
    current: list[str] = []
    for word in words:
        candidate = " ".join([*current, word])
        if current and count(candidate) > budget:
            parts.append(" ".join(current))
            current = [word]
        else:
            current.append(word)
    if current:
        parts.append(" ".join(current))
    # A single word longer than the budget (a base64 blob) is cut by characters.
    return [cut for part in parts for cut in _cut_characters(part, budget, count)]


def _cut_characters(text: str, budget: int, count: Counter) -> list[str]:
    if count(text) <= budget or len(text) <= 1:
        return [text]
    middle = len(text) // 2
    return _cut_characters(text[:middle], budget, count) + _cut_characters(
        text[middle:], budget, count
    )


def step_budget(*, context: int, max_tokens: int, prompt_tokens: int, overhead: int = 64) -> int:
    """Tokens of conversation text one summary step may carry.

    ``context`` less the answer (``max_tokens``), the system prompt and the chat
    template's and instruction's ``overhead``. Raises ``ValueError`` when nothing is
    left: the context setting is too small for the prompt.
    """
    budget = context - max_tokens - prompt_tokens - overhead
    if budget < 16:
        raise ValueError(
            f"a summary step's context of {context} tokens leaves {budget} for the "
            f"conversation after the {prompt_tokens}-token prompt and {max_tokens} "
            "answer tokens; raise LLMQ_SUMMARY_CONTEXT_TOKENS"
        )
    return budget
