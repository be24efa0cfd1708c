"""The worker spawner, for the workers' side (``llmq up``) and those that import it from
here: it lives in ``schemas.worker_process`` so the producer's A/B gate shares it."""

from __future__ import annotations

from schemas.worker_process import (
    WARM_TIMEOUT_S,
    kill_group,
    start_worker_process,
    stop_process,
    wait_until_warm,
)

__all__ = [
    "WARM_TIMEOUT_S",
    "kill_group",
    "start_worker_process",
    "stop_process",
    "wait_until_warm",
]
