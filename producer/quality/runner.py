"""Running cases against one tier or variant through the real queue path (client submit).

Each case becomes an ordinary interactive job (greedy decoding, so two identical engines
give identical answers) and its answer, timings and token counts come back from the
job's result. At most ``concurrency`` jobs are in flight, so queue wait stays small and
first-token times measure the engine, not a backlog the gate itself made.
"""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from producer.client import Client, JobHandle
from producer.quality.cases import Case
from schemas.errors import LlmqError
from schemas.queues import Priority, Tier

DEFAULT_CONCURRENCY = 4
DEFAULT_MAX_TOKENS = 32
# Not a setting: the default of run_cases' timeout_s parameter.
CASE_TIMEOUT_S = 600.0
OWNER = "llmq-ab"
"""The owner of the gate's jobs, so they can be told apart from users' work."""


@dataclass(frozen=True)
class CaseAnswer:
    """One case's answer from one variant."""

    case_id: str
    text: str
    ok: bool
    """The job finished; a failed or timed-out job scores as wrong."""
    ttft_ms: float | None = None
    total_ms: float | None = None
    completion_tokens: int = 0
    error: str | None = None


@dataclass
class VariantRun:
    """Every answer of one variant, and how long the block took."""

    tier: Tier
    answers: dict[str, CaseAnswer] = field(default_factory=dict)
    wall_s: float = 0.0


def case_request(case: Case, *, max_tokens: int | None) -> dict[str, object]:
    """The generation request for ``case``: greedy, with the case's or the given budget."""
    budget = max_tokens or case.max_tokens or DEFAULT_MAX_TOKENS
    return {"messages": case.chat(), "max_tokens": budget, "temperature": 0.0}


def run_cases(
    client: Client,
    tier: Tier,
    cases: Sequence[Case],
    *,
    max_tokens: int | None = None,
    concurrency: int = DEFAULT_CONCURRENCY,
    timeout_s: float = CASE_TIMEOUT_S,
    on_answer: Callable[[CaseAnswer], None] | None = None,
) -> VariantRun:
    """Answer every case on ``tier`` through ``client``; never raises for one case's failure.

    ``max_tokens`` overrides every case's own budget. A submit that is refused (no such
    tier, queue full, Redis down) raises its ``LlmqError`` at once: the run cannot mean
    anything without it.
    """
    run = VariantRun(tier=tier)
    pending: deque[tuple[Case, JobHandle]] = deque()
    todo = deque(cases)
    started = time.perf_counter()
    while todo or pending:
        while todo and len(pending) < concurrency:
            case = todo.popleft()
            handle = client.submit(
                case_request(case, max_tokens=max_tokens),
                tier=tier,
                priority=Priority.INTERACTIVE,
                owner=OWNER,
            )
            pending.append((case, handle))
        case, handle = pending.popleft()
        answer = _wait(case, handle, timeout_s)
        run.answers[case.id] = answer
        if on_answer is not None:
            on_answer(answer)
    run.wall_s = time.perf_counter() - started
    return run


def _wait(case: Case, handle: JobHandle, timeout_s: float) -> CaseAnswer:
    try:
        result = handle.result(timeout=timeout_s)
    except LlmqError as exc:
        return CaseAnswer(case_id=case.id, text="", ok=False, error=str(exc))
    return CaseAnswer(
        case_id=case.id,
        text=result.text,
        ok=True,
        ttft_ms=result.timings.ttft_ms,
        total_ms=result.timings.total_ms,
        completion_tokens=result.usage.completion_tokens,
    )
