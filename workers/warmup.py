"""Warming an engine before its worker takes work, so no user meets a cold first token."""

from __future__ import annotations

import logging
import threading
import time

from workers.engine.base import Engine, SamplingOptions

log = logging.getLogger(__name__)

WARMUP_PROMPTS = ("Hello!", "What are your opening hours?")
WARMUP_TOKENS = 8


def warm_up(engine: Engine, *, concurrency: int = 2) -> float:
    """Run short generations, one alone then several at once; return the seconds spent.

    The first pass pays one-time costs (allocation, kernel selection); the concurrent
    pass exercises the batched path the worker will use under load.
    """
    started = time.monotonic()
    _generate(engine, WARMUP_PROMPTS[0], "warmup-single")
    threads = [
        threading.Thread(
            target=_generate,
            args=(engine, WARMUP_PROMPTS[i % len(WARMUP_PROMPTS)], f"warmup-batch-{i}"),
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


def _generate(engine: Engine, text: str, request_id: str) -> None:
    prompt = engine.render_chat([{"role": "user", "content": text}])
    options = SamplingOptions(max_tokens=WARMUP_TOKENS, temperature=0.0)
    for _ in engine.stream(prompt, options, request_id):
        pass
