"""Worker-side ``llmq`` commands: ``worker``, ``model prepare`` and ``up``.

Registered through the ``llmq.commands`` entry points; heavy imports (vLLM, torch)
happen only when a command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from schemas.queues import Tier


def register_worker(commands: Any) -> None:
    """Add ``llmq worker --tier T [--gpu N]``."""
    worker = commands.add_parser("worker", help="run a GPU-pinned worker for one tier")
    worker.add_argument("--tier", required=True, choices=[t.value for t in Tier])
    worker.add_argument("--gpu", default=None, help="GPU index to pin (CUDA_VISIBLE_DEVICES)")
    worker.add_argument(
        "--concurrency", type=int, default=None, help="jobs at once (default: the tier's)"
    )
    worker.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port"
    )
    worker.set_defaults(handler=_worker)


def _worker(args: argparse.Namespace) -> int:
    from schemas.settings import Settings
    from workers.worker import WorkerOptions, run_worker

    settings = Settings.from_env()
    options = WorkerOptions(
        tier=Tier(args.tier),
        gpu=args.gpu,
        concurrency=args.concurrency,
        loglevel=settings.log_level,
        metrics_port=args.metrics_port,
    )
    return run_worker(settings, options)


def register_model(commands: Any) -> None:
    """Add ``llmq model prepare``."""
    model = commands.add_parser("model", help="manage the models workers load")
    actions = model.add_subparsers(title="actions", metavar="ACTION", required=True)
    prepare = actions.add_parser(
        "prepare", help="convert the bundled GGUF model into a vLLM folder (once, cached)"
    )
    prepare.set_defaults(handler=_prepare)


def _prepare(_args: argparse.Namespace) -> int:
    from schemas.settings import Settings
    from workers.models import prepare_bundled_model

    print(prepare_bundled_model(Settings.from_env().bundled_model_dir))
    return 0


def register_up(commands: Any) -> None:
    """Add ``llmq up``."""
    up = commands.add_parser(
        "up", help="run the whole stack locally on the embedded default (Ctrl-C stops it)"
    )
    up.add_argument("--tier", default=None, help="tier of the worker (default: the default tier)")
    up.add_argument("--concurrency", type=int, default=None)
    up.set_defaults(handler=_up)


def _up(args: argparse.Namespace) -> int:
    from schemas.settings import Settings
    from workers.up import run_up

    settings = Settings.from_env()
    tier = Tier(args.tier) if args.tier else settings.default_tier
    return run_up(settings, tier=tier, concurrency=args.concurrency)
