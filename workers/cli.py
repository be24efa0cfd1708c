"""Worker-side ``llmq`` commands: ``worker``, ``model prepare`` and ``up``.

Registered through the ``llmq.commands`` entry points; heavy imports (vLLM, torch)
happen only when a command runs.
"""

from __future__ import annotations

import argparse
from typing import Any

from schemas.queues import Tier
from schemas.tier_option import tier_option


def register_worker(commands: Any) -> None:
    """Add ``llmq worker --tier T [--gpu N]``."""
    worker = commands.add_parser("worker", help="run a GPU-pinned worker for one tier")
    worker.add_argument(
        "--tier",
        required=True,
        type=_tier,
        help="small, medium, large, a configured variant such as small@bf16, or embed "
        "(the embedding tier, sentence-transformers)",
    )
    worker.add_argument("--gpu", default=None, help="GPU index to pin (CUDA_VISIBLE_DEVICES)")
    worker.add_argument(
        "--concurrency", type=int, default=None, help="jobs at once (default: the tier's)"
    )
    worker.add_argument(
        "--metrics-port", type=int, default=None, help="serve Prometheus /metrics on this port"
    )
    worker.add_argument(
        "--verbose",
        action="store_true",
        help="engine logs on the terminal (default there: a few lines, the logs in a file)",
    )
    worker.set_defaults(handler=_worker)


_tier = tier_option("small, medium, large, embed, or <tier>@<variant>")


def _worker(args: argparse.Namespace) -> int:
    import logging
    import os
    import sys

    from schemas.settings import Settings
    from workers.worker import WorkerOptions, run_worker

    settings = Settings.from_env()
    loglevel = args.log_level or settings.log_level
    # The process logs at the worker's level (the top-level default is WARNING).
    logging.getLogger().setLevel(loglevel.upper())
    if Tier(args.tier) == Tier.EMBED:
        return _embed_worker(settings, args, loglevel)
    options = WorkerOptions(
        tier=Tier(args.tier),
        gpu=args.gpu,
        concurrency=args.concurrency,
        loglevel=loglevel,
        metrics_port=args.metrics_port,
    )
    # Quiet only for a person at a terminal who asked for nothing else; a container's
    # log collector and an explicit --log-level or LLMQ_LOG_LEVEL get everything.
    explicit = args.verbose or args.log_level is not None or "LLMQ_LOG_LEVEL" in os.environ
    if explicit or not sys.stderr.isatty():
        return run_worker(settings, options)
    return _quiet_worker(settings, options)


def _embed_worker(settings: Any, args: argparse.Namespace, loglevel: str) -> int:
    """The embedding tier's worker: sentence-transformers on the CPU, the model from
    ``LLMQ_EMBED_MODEL`` (a local folder; default: the bundled all-MiniLM-L6-v2)."""
    import os

    from workers.embeddings.model import BUNDLED_EMBED_MODEL, embed_model_dir
    from workers.embeddings.worker import EmbedWorkerOptions, run_embed_worker

    model_dir = embed_model_dir(os.environ.get("LLMQ_EMBED_MODEL", BUNDLED_EMBED_MODEL))
    options = EmbedWorkerOptions(
        model_dir=model_dir, concurrency=args.concurrency or 1, loglevel=loglevel
    )
    return run_embed_worker(settings, options)


def _quiet_worker(settings: Any, options: Any) -> int:
    import dataclasses
    import os

    from workers.console import StartupView, default_log_path, explain_notes, output_to_file
    from workers.worker import run_worker

    tier = options.tier.value
    log_path = default_log_path(settings.model_cache_dir / "logs", f"worker-{tier}-{os.getpid()}")
    with output_to_file(log_path) as terminal:
        view = StartupView(terminal, prefix=f"llmq worker {tier}")
        view.say(f"engine logs go to {log_path}")
        view.warming("engine")

        def on_phase(phase: str) -> None:
            if phase != "ready":
                view.phase(phase)
                return
            took = view.done()
            view.say(f"warm after {took:.0f} s; consuming llm.{tier}.* (Ctrl-C stops)")
            if note := explain_notes(log_path):
                view.say(f"note: {note}")

        try:
            return run_worker(settings, dataclasses.replace(options, on_phase=on_phase))
        finally:
            view.done()
            view.say(f"stopped; the full log is {log_path}")


def register_model(commands: Any) -> None:
    """Add ``llmq model prepare``."""
    model = commands.add_parser("model", help="manage the models workers load")
    actions = model.add_subparsers(title="actions", metavar="ACTION", required=True)
    prepare = actions.add_parser(
        "prepare", help="convert the bundled GGUF models into vLLM folders (once, cached)"
    )
    prepare.set_defaults(handler=_prepare)


def _prepare(_args: argparse.Namespace) -> int:
    import os

    from schemas.progress import ProgressBar
    from schemas.settings import Settings
    from workers.models import resolve_model

    # One line per model tells the story; transformers' own bars for each inner step
    # would redraw over it (tqdm reads this when first imported, below).
    os.environ.setdefault("TQDM_DISABLE", "1")
    settings = Settings.from_env()
    # Every bundled model a configured tier uses (both, with the default table).
    models = sorted({c.model for c in settings.tiers.values() if c.model.startswith("bundled:")})
    for model in models:
        with ProgressBar(f"model prepare {model}") as bar:
            path = resolve_model(model, settings.bundled_model_dir, on_phase=bar.phase)
        print(path)
    return 0


def register_up(commands: Any) -> None:
    """Add ``llmq up``."""
    up = commands.add_parser(
        "up", help="run the whole stack locally on the embedded default (Ctrl-C stops it)"
    )
    which = up.add_mutually_exclusive_group()
    which.add_argument(
        "--tier", default=None, help="tier of the worker (default: the default tier)"
    )
    which.add_argument(
        "--tiers",
        default=None,
        help="several tiers, one worker each, from this host: small,large or all "
        "(every configured tier); the host's memory is split between their engines; "
        "embed adds the embedding tier's worker (small,embed)",
    )
    up.add_argument("--concurrency", type=int, default=None)
    up.add_argument(
        "--verbose",
        action="store_true",
        help="show every log line (default: a few lines, the logs in a file)",
    )
    up.set_defaults(handler=_up)


def _up(args: argparse.Namespace) -> int:
    from schemas.settings import Settings
    from workers.memory_split import parse_tiers
    from workers.up import run_up

    settings = Settings.from_env()
    if args.tiers:
        tiers = parse_tiers(args.tiers, list(settings.tiers))
    else:
        tiers = [Tier(args.tier) if args.tier else settings.default_tier]
    return run_up(settings, tiers=tiers, concurrency=args.concurrency, verbose=args.verbose)
