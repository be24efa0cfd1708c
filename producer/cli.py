"""The ``llmq`` command. Producer commands live here; others plug in by entry point.

Commands whose code needs the worker side (``worker``, ``up``, ``model``, ``bench``)
are registered through the ``llmq.commands`` entry-point group, so this module never
imports the workers package and a producer-only install still has a working CLI.
"""

from __future__ import annotations

import argparse
import logging
import os
import sys
from collections.abc import Callable, Sequence
from importlib.metadata import entry_points

from producer.batches.cli import register as register_batch
from producer.top import register as register_top
from schemas.errors import LlmqError
from schemas.queues import Priority, Tier
from schemas.settings import Settings

Handler = Callable[[argparse.Namespace], int]

# What a shell reports for a process ended by SIGPIPE (128 + 13).
BROKEN_PIPE_EXIT = 141

EXTRA_HINT = "this command needs the worker extra: pip install 'llmq[cpu]' (or 'llmq[gpu]')"

# Modules of an extra other than the worker's, to name the one a missing module is in.
MODULE_EXTRAS = {
    "matplotlib": "bench",
    "openai": "bench",
    "fastapi": "gateway",
    "uvicorn": "gateway",
    "multipart": "gateway",
    "flower": "gateway",
}


def extra_hint(module: str | None) -> str:
    """Which extra to install for a missing ``module`` (the worker's unless known)."""
    extra = MODULE_EXTRAS.get((module or "").partition(".")[0])
    if extra is None:
        return EXTRA_HINT
    return f"this command needs the {extra} extra: pip install 'llmq[{extra}]'"


def main(argv: Sequence[str] | None = None) -> int:
    """Entry point of ``llmq``; returns the process exit code."""
    parser = build_parser()
    args = parser.parse_args(argv)
    logging.basicConfig(
        level=getattr(args, "log_level", None) or "WARNING",
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
    )
    handler: Handler | None = getattr(args, "handler", None)
    if handler is None:
        parser.print_help()
        return 2
    return run_handler(handler, args)


def run_handler(handler: Handler, args: argparse.Namespace) -> int:
    """Run a command; what goes wrong becomes one line on stderr and an exit code."""
    try:
        return handler(args)
    except LlmqError as exc:
        print(f"llmq: error: {exc}", file=sys.stderr)
        return 1
    except ModuleNotFoundError as exc:
        print(f"llmq: error: missing module {exc.name!r}; {extra_hint(exc.name)}", file=sys.stderr)
        return 1
    except KeyboardInterrupt:
        print("llmq: interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:
        # The reader went away (llmq batch results ID | head): stop quietly, and keep
        # Python from complaining again when it flushes stdout at exit.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return BROKEN_PIPE_EXIT
    except Exception as exc:
        # A bug, not the user's doing: one line for them, the traceback for a bug report.
        logging.getLogger("llmq").debug("unexpected error", exc_info=True)
        print(
            f"llmq: internal error ({exc.__class__.__name__}: {exc}); "
            "run with --log-level DEBUG for the traceback",
            file=sys.stderr,
        )
        return 1


def build_parser() -> argparse.ArgumentParser:
    """All subcommands: the producer's own and every registered plug-in."""
    parser = argparse.ArgumentParser(
        prog="llmq", description="Queue-first LLM serving: submit, route, stream."
    )
    # None when not given, so a command can tell "default" from an explicit choice.
    parser.add_argument("--log-level", default=None, help="logging level (default WARNING)")
    commands = parser.add_subparsers(title="commands", metavar="COMMAND")
    _add_submit(commands)
    _add_status(commands)
    register_top(commands)
    register_batch(commands)
    for entry in sorted(entry_points(group="llmq.commands"), key=lambda e: e.name):
        try:
            register = entry.load()
        except ImportError as exc:
            _add_unavailable(commands, entry.name, exc)
            continue
        register(commands)
    return parser


def _add_unavailable(
    commands: argparse._SubParsersAction[argparse.ArgumentParser], name: str, exc: ImportError
) -> None:
    # A plug-in whose dependencies are missing still shows up, and says why.
    def unavailable(_args: argparse.Namespace) -> int:
        hint = extra_hint(exc.name)
        print(f"llmq: error: '{name}' is unavailable ({exc}); {hint}", file=sys.stderr)
        return 1

    command = commands.add_parser(name, help=f"(unavailable: {exc.__class__.__name__})")
    command.set_defaults(handler=unavailable)


def _add_submit(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    submit = commands.add_parser("submit", help="submit text and stream the answer")
    submit.add_argument("text", help="the user message")
    submit.add_argument("--tier", default="auto", choices=["auto", *[t.value for t in Tier]])
    submit.add_argument(
        "--priority", default=Priority.INTERACTIVE.value, choices=[p.value for p in Priority]
    )
    submit.add_argument("--max-tokens", type=int, default=128)
    submit.add_argument("--temperature", type=float, default=0.7)
    submit.add_argument("--idempotency-key", default=None)
    submit.add_argument("--timeout", type=float, default=300.0, help="seconds to wait")
    submit.add_argument("--json", action="store_true", help="print the result as JSON")
    submit.set_defaults(handler=_submit)


def _submit(args: argparse.Namespace) -> int:
    from producer.client import Client

    with Client(Settings.from_env()) as client:
        handle = client.submit(
            {
                "messages": [{"role": "user", "content": args.text}],
                "max_tokens": args.max_tokens,
                "temperature": args.temperature,
            },
            tier=args.tier,
            priority=args.priority,
            idempotency_key=args.idempotency_key,
            subscribe=True,  # the answer is read at once
        )
        if args.json:
            print(handle.result(timeout=args.timeout).model_dump_json())
            return 0
        for chunk in handle.stream(timeout=args.timeout):
            print(chunk, end="", flush=True)
        result = handle.result()
        print(flush=True)
        timings = result.timings
        print(
            f"[job {result.job_id} tier={result.tier} tokens={result.usage.completion_tokens} "
            f"ttft={timings.ttft_ms or 0:.0f}ms total={timings.total_ms:.0f}ms]",
            file=sys.stderr,
        )
    return 0


def _add_status(commands: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    status = commands.add_parser("status", help="queue depths, workers and engine warmth")
    status.set_defaults(handler=_status)


def _status(_args: argparse.Namespace) -> int:
    from producer.status import render_status
    from schemas.broker import redis_client

    settings = Settings.from_env()
    print(render_status(redis_client(settings.broker_url)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
