"""The mixed workload of ``llmq bench mixed``: a seeded, open-loop schedule of requests.

A trace is a list of :class:`Event` s sorted by ``t`` (seconds from the start). It is
built once, from a seed, and replayed against every side, so each side sees the same
requests at the same moments whatever its answers are (open loop: an arrival never
waits for an earlier answer).

What it holds:

* **Interactive requests** arrive as a Poisson process (``interactive_rate`` per
  second over the whole run). Most are turns of support chats: the registered support
  system prompt (``support_share`` of the chats), the user's messages drawn from the
  labelled routing set (``producer/router/data``) in an easy/medium/hard mix (the
  set's ``small``/``medium``/``large`` labels), one to ``max_turns`` turns at least
  ``think_s`` apart. A later turn resends the whole history, append only, with a fixed
  assistant reply for each earlier turn (the trace cannot know the real answers; fixed
  replies keep both sides' prompts identical). The rest (``case_share``) are
  single-turn quality cases from the A/B gate's bundled case file, each carrying its
  case id so its answer can be scored.
* **A batch flood** starts at ``flood_start`` of the run: summaries of long support
  transcripts (the registered summarize prompt), a Poisson process of ``batch_rate``
  per second until the end, with a larger answer budget.

Nothing here talks to a server; :mod:`bench.mixed` replays the trace.
"""

from __future__ import annotations

import math
import random
from dataclasses import dataclass, field
from typing import Literal

from producer.quality.cases import Case, load_bench_pool
from producer.router.dataset import load_examples
from schemas.queues import Tier

Kind = Literal["interactive", "batch"]
Message = dict[str, str]

SUPPORT_PROMPT = "support@1"
"""The registered ~2,000-token customer-service prompt (pinned: one prefix per chat)."""
SUMMARY_PROMPT = "summarize@1"

ASSISTANT_REPLIES = (
    "Thanks for reaching out. I have checked your account and can help with that.",
    "I understand. Could you share your order number so I can look into it?",
    "Of course. Here is what our policy says and how it applies to your order.",
    "I am sorry about the trouble. I have opened a case and a colleague will follow up.",
    "Good news: that is possible. I have made the change on your account.",
    "Let me explain the options you have, and what each one costs.",
)
"""What a chat's earlier assistant turns say in the resent history."""

TRANSCRIPT_LINES = (10, 16)
"""Customer and agent lines in one transcript to summarize (~350-550 tokens)."""


@dataclass(frozen=True)
class TracePlan:
    """How a trace is built; every default sized for a 2-core CPU host and a 135M model.

    Measured there (vLLM's server, float32): ~15 tokens/s for one stream, ~33 tokens/s
    for eight at once, ~400-700 prompt tokens/s of prefill. The interactive load alone
    (0.25/s, up to 32 tokens) takes about a quarter of that; the flood (2/s of
    ~450-token transcripts, 96-token summaries) asks for several times all of it, so
    vLLM's own server, which serves every request as it comes, soon has more requests
    than its 16 sequences and queues everyone behind the flood.
    """

    minutes: float = 2.0
    seed: int = 7
    interactive_rate: float = 0.25
    batch_rate: float = 2.0
    flood_start: float = 0.25
    support_share: float = 0.8
    case_share: float = 0.25
    max_turns: int = 4
    continue_share: float = 0.6
    think_s: float = 8.0
    mix: tuple[float, float, float] = (0.5, 0.3, 0.2)
    interactive_max_tokens: int = 32
    batch_max_tokens: int = 96

    def __post_init__(self) -> None:
        if self.minutes <= 0 or self.interactive_rate < 0 or self.batch_rate < 0:
            raise ValueError("minutes must be positive and rates not negative")
        for name in ("flood_start", "support_share", "case_share", "continue_share"):
            if not 0.0 <= getattr(self, name) <= 1.0:
                raise ValueError(f"{name} must be between 0 and 1")
        if len(self.mix) != 3 or abs(sum(self.mix) - 1.0) > 1e-6 or min(self.mix) < 0:
            raise ValueError("mix needs three shares (easy, medium, hard) that add up to 1")
        if self.max_turns < 1:
            raise ValueError("max_turns must be at least 1")

    @property
    def duration_s(self) -> float:
        return self.minutes * 60.0

    @property
    def flood_start_s(self) -> float:
        return self.flood_start * self.duration_s


@dataclass(frozen=True)
class Event:
    """One request of the trace.

    ``messages`` never holds the registered system prompt: ``system_prompt`` names it
    (pinned), and the replay sends its text (vLLM) or its name (llmq).
    """

    t: float
    kind: Kind
    messages: tuple[Message, ...]
    max_tokens: int
    case: str | None = None
    system_prompt: str | None = None
    conversation: str | None = None
    turn: int = 1
    difficulty: str | None = None


@dataclass
class _Chat:
    id: str
    system_prompt: str | None
    turns_left: int
    last_t: float = 0.0
    history: list[Message] = field(default_factory=list)


def poisson_times(rng: random.Random, rate: float, start: float, end: float) -> list[float]:
    """Arrival times of a Poisson process of ``rate`` per second in ``[start, end)``."""
    times: list[float] = []
    if rate <= 0:
        return times
    t = start
    while True:
        t += rng.expovariate(rate)
        if t >= end:
            return times
        times.append(t)


def build_trace(plan: TracePlan, *, cases: list[Case] | None = None) -> list[Event]:
    """The trace of ``plan``: the same plan (seed included) always gives the same events.

    ``cases`` defaults to the bundled cases the benchmarks sample (``load_bench_pool``).
    """
    rng = random.Random(plan.seed)
    by_tier: dict[Tier, list[str]] = {tier: [] for tier in Tier}
    for example in load_examples():
        by_tier[example.tier].append(example.text)
    case_pool = list(cases if cases is not None else load_bench_pool())
    events = _interactive(rng, plan, by_tier, case_pool)
    # Its own stream of numbers: the flood stays the same when interactive settings change.
    flood_rng = random.Random(plan.seed * 1_000_003 + 1)
    for t in poisson_times(flood_rng, plan.batch_rate, plan.flood_start_s, plan.duration_s):
        events.append(_summary(flood_rng, t, plan, by_tier))
    return sorted(events, key=lambda event: (event.t, event.kind))


def _interactive(
    rng: random.Random,
    plan: TracePlan,
    by_tier: dict[Tier, list[str]],
    cases: list[Case],
) -> list[Event]:
    events: list[Event] = []
    open_chats: list[_Chat] = []
    chats = 0
    for t in poisson_times(rng, plan.interactive_rate, 0.0, plan.duration_s):
        if cases and rng.random() < plan.case_share:
            events.append(_case_event(rng.choice(cases), t, plan))
            continue
        # A person reads the answer before writing again: only a chat whose last turn
        # is ``think_s`` old may go on (the oldest first).
        ready = [chat for chat in open_chats if t - chat.last_t >= plan.think_s]
        if ready and rng.random() < plan.continue_share:
            chat = ready[0]
        else:
            chats += 1
            prompt = SUPPORT_PROMPT if rng.random() < plan.support_share else None
            chat = _Chat(f"chat-{chats:04d}", prompt, rng.randint(1, plan.max_turns))
            open_chats.append(chat)
        difficulty = rng.choices(list(Tier), weights=plan.mix)[0]
        user = {"role": "user", "content": rng.choice(by_tier[difficulty])}
        turn = len(chat.history) // 2 + 1
        events.append(
            Event(
                t=t,
                kind="interactive",
                messages=(*chat.history, user),
                max_tokens=plan.interactive_max_tokens,
                system_prompt=chat.system_prompt,
                conversation=chat.id,
                turn=turn,
                difficulty=_DIFFICULTY[difficulty],
            )
        )
        chat.history += [user, {"role": "assistant", "content": rng.choice(ASSISTANT_REPLIES)}]
        chat.turns_left -= 1
        chat.last_t = t
        if chat.turns_left == 0:
            open_chats.remove(chat)
    return events


_DIFFICULTY = {Tier.SMALL: "easy", Tier.MEDIUM: "medium", Tier.LARGE: "hard"}


def _case_event(case: Case, t: float, plan: TracePlan) -> Event:
    messages = case.messages or [{"role": "user", "content": case.prompt or ""}]
    return Event(
        t=t,
        kind="interactive",
        messages=tuple(dict(m) for m in messages),
        max_tokens=case.max_tokens or plan.interactive_max_tokens,
        case=case.id,
    )


def _summary(
    rng: random.Random, t: float, plan: TracePlan, by_tier: dict[Tier, list[str]]
) -> Event:
    pool = [text for texts in by_tier.values() for text in texts]
    lines = []
    for index in range(rng.randint(*TRANSCRIPT_LINES)):
        if index % 2 == 0:
            lines.append(f"CUSTOMER: {rng.choice(pool)}")
        else:
            lines.append(f"AGENT: {rng.choice(ASSISTANT_REPLIES)}")
    content = "Summarize this conversation.\n\n" + "\n".join(lines)
    return Event(
        t=t,
        kind="batch",
        messages=({"role": "user", "content": content},),
        max_tokens=plan.batch_max_tokens,
        system_prompt=SUMMARY_PROMPT,
    )


def describe(events: list[Event], plan: TracePlan) -> dict[str, object]:
    """Counts of a trace, for the report."""
    interactive = [e for e in events if e.kind == "interactive"]
    return {
        "trace_seed": plan.seed,
        "trace_s": plan.duration_s,
        "interactive_requests": len(interactive),
        "interactive_with_support_prompt": sum(e.system_prompt is not None for e in interactive),
        "interactive_later_turns": sum(e.turn > 1 for e in interactive),
        "quality_cases": sum(e.case is not None for e in interactive),
        "batch_requests": len(events) - len(interactive),
        "flood_start_s": round(plan.flood_start_s, 1),
        "interactive_rate_per_s": plan.interactive_rate,
        "batch_rate_per_s": plan.batch_rate,
    }


def expected_count(rate: float, seconds: float) -> tuple[float, float]:
    """Mean and standard deviation of a Poisson count (for tests and sanity checks)."""
    mean = rate * seconds
    return mean, math.sqrt(mean)
