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

    options = WorkerOptions(
        tier=Tier(args.tier),
        gpu=args.gpu,
        concurrency=args.concurrency,
        loglevel="INFO",
        metrics_port=args.metrics_port,
    )
    return run_worker(Settings.from_env(), options)


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


def register_router_actions(actions: Any) -> None:
    """Add ``llmq router train`` and ``llmq router retrain`` (they need torch)."""
    train = actions.add_parser("train", help="distil the encoder and train the router")
    train.add_argument("--seed", type=int, default=7)
    train.set_defaults(handler=_train_router, with_corrections=False)
    retrain = actions.add_parser(
        "retrain", help="train again, adding the job rows an operator corrected"
    )
    retrain.add_argument("--seed", type=int, default=7)
    retrain.set_defaults(handler=_train_router, with_corrections=True)


def _train_router(args: argparse.Namespace) -> int:
    import json

    from schemas.settings import Settings
    from workers.router_training import train_router

    settings = Settings.from_env()
    extra = []
    if args.with_corrections:
        from producer.router.corrections import corrected_examples
        from schemas.db import make_engine, make_sessions

        engine = make_engine(settings.database_url)
        try:
            extra = corrected_examples(make_sessions(engine))
        finally:
            engine.dispose()
    path, metadata = train_router(settings, seed=args.seed, extra=extra)
    print(json.dumps({"artifact": str(path), "corrections": len(extra), **metadata}))
    return 0
