"""Warming an engine before its worker takes work, and keeping it warm.

Warm means two things: the engine has run real generations (one-time costs paid),
and every registered system prompt of the tier sits in the prefix cache, so the
first request that uses one is a cache hit.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass, field

from schemas.prompt_registry import PromptCatalog, SystemPrompt
from schemas.queues import Tier
from schemas.sampling import Sampling
from schemas.timeouts import DEFAULT_TIMEOUTS
from workers.background import BackgroundLoop
from workers.engine.base import BACKGROUND_PRIORITY, Engine, EngineRequest, SamplingOptions
from workers.jobs import claim_job
from workers.prefix import PrefixCacheStats
from workers.registry import EngineTiming
from workers.worker_runtime import WorkerRuntime

log = logging.getLogger(__name__)

WARMUP_PROMPTS = ("Hello!", "What are your opening hours?")
WARMUP_TOKENS = 8
WARMUP_TOP_LOGPROBS = 2
TIMING_PROMPT = "Count from one to twenty, in words."
TIMING_TOKENS = 12
TIMING_RUNS = 2
PREFILL_USER_TURNS = ("Hi.", "Thanks, one more question please.")
PREFILL_TOKENS = 4
CHECK_EVERY_S = DEFAULT_TIMEOUTS.prompt_check_s
"""The default of ``settings.timeouts.prompt_check_s``."""


def warm_up(engine: Engine, *, concurrency: int = 2) -> float:
    """Run short generations, one alone then several at once; return the seconds spent.

    The first pass pays one-time costs (allocation, kernel selection); one more asks for
    log probabilities, a sampler path of its own (where the engine compiles, vLLM
    compiles its log-probability kernel at the first request that wants them: seconds
    of the whole engine's time that the first such request, and every stream beside
    it, would otherwise wait); the concurrent pass exercises the batched path the
    worker will use under load.
    """
    started = time.monotonic()
    _generate(
        engine, [{"role": "user", "content": WARMUP_PROMPTS[0]}], "warmup-single", WARMUP_TOKENS
    )
    _generate(
        engine,
        [{"role": "user", "content": WARMUP_PROMPTS[1]}],
        "warmup-logprobs",
        WARMUP_TOKENS,
        sampling=Sampling(logprobs=WARMUP_TOP_LOGPROBS),
    )
    threads = [
        threading.Thread(
            target=_generate,
            args=(
                engine,
                [{"role": "user", "content": WARMUP_PROMPTS[i % len(WARMUP_PROMPTS)]}],
                f"warmup-batch-{i}",
                WARMUP_TOKENS,
            ),
        )
        for i in range(concurrency)
    ]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    spent = time.monotonic() - started
    log.info("engine warm-up took %.1f s", spent)
    return spent


def time_engine(
    engine: Engine, *, runs: int = TIMING_RUNS, clock: Callable[[], float] = time.monotonic
) -> EngineTiming:
    """A lone request's first token and decode step on the warm engine, the fastest of
    ``runs`` of each (a shared host's stray slow moment is not the engine's speed)."""
    timings = [_time_one(engine, f"timing-{index}", clock) for index in range(runs)]
    timing = EngineTiming(
        first_token_s=min(t.first_token_s for t in timings),
        step_s=min(t.step_s for t in timings),
    )
    log.info(
        "engine timing: first token %.1f ms, decode step %.1f ms (%.2f of a first token)",
        timing.first_token_s * 1000,
        timing.step_s * 1000,
        timing.step_share,
    )
    return timing


def _time_one(engine: Engine, request_id: str, clock: Callable[[], float]) -> EngineTiming:
    prompt = engine.render_chat([{"role": "user", "content": TIMING_PROMPT}])
    options = SamplingOptions(max_tokens=TIMING_TOKENS, temperature=0.0)
    started = clock()
    first: tuple[float, int] | None = None
    last = (started, 0)
    for delta in engine.stream(EngineRequest(prompt, options, request_id)):
        last = (clock(), delta.completion_tokens)
        first = first or last
    if first is None or last[1] <= first[1]:
        # One token, or one delta: no decode step to see; count it as a step as long.
        spent = last[0] - started
        return EngineTiming(first_token_s=spent, step_s=spent)
    step_s = (last[0] - first[0]) / (last[1] - first[1])
    return EngineTiming(first_token_s=first[0] - started, step_s=step_s)


def prefill_prompts(engine: Engine, prompts: list[SystemPrompt]) -> dict[str, int]:
    """Put each prompt's prefix in the prefix cache; return its length in tokens by ref.

    The prefix is rendered exactly as a request renders it (system turn first), so a
    request's prompt starts with the same token blocks and finds them cached. A second
    request then runs the path every real request takes (cached prefix, new suffix,
    decoding at long context), so the first real one pays nothing extra.
    """
    prefixes: dict[str, int] = {}
    for prompt in prompts:
        system = [{"role": "system", "content": prompt.text}]
        prefixes[prompt.ref] = len(engine.render_chat(system))
        started = time.monotonic()
        for turn in PREFILL_USER_TURNS:
            messages = [*system, {"role": "user", "content": turn}]
            _generate(engine, messages, f"prefill-{prompt.ref}-{time.time_ns()}", PREFILL_TOKENS)
        log.info(
            "prefilled %s (%d tokens) in %.1f s",
            prompt.ref,
            prefixes[prompt.ref],
            time.monotonic() - started,
        )
    return prefixes


def warm_job_path(runtime: WorkerRuntime) -> None:
    """Open the connections and compile the statements every job uses.

    Claiming a job id that cannot exist touches the database exactly as a real claim
    does, and changes nothing.
    """
    runtime.redis.ping()
    claim_job(runtime.sessions, "warm-up-probe", runtime.worker_id)


def _generate(
    engine: Engine,
    messages: list[dict[str, str]],
    request_id: str,
    tokens: int,
    *,
    sampling: Sampling | None = None,
) -> None:
    prompt = engine.render_chat(messages)
    # Prefills run beside live work once the worker serves: never ahead of a person.
    options = SamplingOptions(
        max_tokens=tokens, temperature=0.0, priority=BACKGROUND_PRIORITY, sampling=sampling
    )
    for _ in engine.stream(EngineRequest(prompt, options, request_id)):
        pass


@dataclass(eq=False)
class KeepWarm(BackgroundLoop):
    """Re-prefills registered prompts when they change, on a timer, and after an eviction."""

    thread_name = "llmq-keep-warm"

    engine: Engine
    catalog: PromptCatalog
    stats: PrefixCacheStats
    _: KW_ONLY
    tier: Tier
    interval_s: float
    """Re-prefill at least this often."""
    check_s: float = CHECK_EVERY_S
    """Look this often whether a re-prefill is due."""
    refills: int = field(default=0, init=False)
    _last_prefill: float = field(default_factory=time.monotonic, init=False, repr=False)

    def __post_init__(self) -> None:
        super().__init__()

    def prefill_now(self) -> None:
        """Prefill every prompt of the tier and record their prefix lengths."""
        prefixes = prefill_prompts(self.engine, self.catalog.registry.to_prefill(self.tier))
        self.stats.set_prefixes(prefixes)
        self._last_prefill = time.monotonic()

    def run(self) -> None:
        while not self._stopping.wait(self.check_s):
            try:
                reason = self._due()
                if reason:
                    log.info("re-prefilling system prompts: %s", reason)
                    self.prefill_now()
                    self.refills += 1
            except Exception:
                log.exception("keep-warm pass failed; trying again later")

    def _due(self) -> str | None:
        if self.catalog.reload():
            return "the prompt registry changed"
        if self.stats.eviction_suspected.is_set():
            return "a registered prompt missed the prefix cache"
        if time.monotonic() - self._last_prefill >= self.interval_s:
            return "periodic refresh"
        return None
