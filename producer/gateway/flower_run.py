"""Flower's process: Flower itself, ended as soon as its loop stops.

Flower stops on SIGTERM (or Ctrl-C) by leaving its loop. Python's exit would then wait
for Flower's threads that ask the workers for their state: each inspect call lasts up
to Flower's ``inspect_timeout``, and one stuck on the broker lasts for ever (a Flower
once outlived its SIGTERM by twenty minutes). So once the loop has stopped, this runs
Flower's own exit handlers (a persistent Flower saves its state there) and ends the
process without waiting for those threads: nothing they would still bring is wanted.

Run as ``python -m producer.gateway.flower_run FLOWER-ARGUMENTS``; ``llmq flower``
does (``producer.gateway.cli``).
"""

from __future__ import annotations

import atexit
import os
import sys

from celery.bin.celery import celery


def main(argv: list[str]) -> int:
    """Run ``celery flower`` with ``argv``; its exit code."""
    try:
        celery.main(["flower", *argv], prog_name="celery", auto_envvar_prefix="CELERY")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else int(exc.code is not None)
    return 0


def run_and_end(argv: list[str]) -> None:
    """:func:`main`, then the exit handlers, then the end of the process."""
    code = main(argv)
    atexit._run_exitfuncs()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


if __name__ == "__main__":
    run_and_end(sys.argv[1:])
