"""Running a worker's Celery consumer: the one way every kind of worker takes jobs."""

from __future__ import annotations

from collections.abc import Sequence

from celery import Celery


def consume(
    app: Celery, *, hostname: str, queues: Sequence[str], concurrency: int, loglevel: str
) -> int:
    """Consume ``queues`` with ``concurrency`` job threads until the worker stops; return
    its exit code.

    One message per slot at a time (``prefetch_multiplier=1``): a message a worker
    holds but cannot start yet is one no other worker can take. Gossip and mingle are
    off: workers learn of each other through the registry, not through Celery.
    """
    worker = app.Worker(
        hostname=hostname,
        queues=list(queues),
        pool="threads",
        concurrency=concurrency,
        prefetch_multiplier=1,
        loglevel=loglevel,
        without_gossip=True,
        without_mingle=True,
        quiet=True,
    )
    worker.start()
    return int(worker.exitcode or 0)
