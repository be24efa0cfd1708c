"""``llmq batch submit|status|results|cancel|resume``: the Batch API without the gateway."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schemas.queues import Tier

if TYPE_CHECKING:
    from producer.client import Client


def register(commands: Any) -> None:
    """Add ``llmq batch`` and its actions."""
    batch = commands.add_parser("batch", help="batches of requests from a JSONL file")
    actions = batch.add_subparsers(title="actions", metavar="ACTION", required=True)
    submit = actions.add_parser("submit", help="upload a JSONL file and enqueue it as a batch")
    submit.add_argument("file", type=Path, help="one request a line, OpenAI's batch format")
    submit.add_argument("--tier", default="auto", choices=["auto", *[t.value for t in Tier]])
    submit.add_argument("--window", default="24h", help="completion window (24h, 30m, 2d...)")
    _owner(submit)
    submit.set_defaults(handler=_submit)
    for name, help_, handler in (
        ("status", "a batch's status and request counts (JSON)", _status),
        ("results", "every line's output or error, as JSONL on stdout", _results),
        ("cancel", "cancel a batch: nothing more of it runs", _cancel),
        ("resume", "send the lines an interrupted submit left unsent", _resume),
    ):
        action = actions.add_parser(name, help=help_)
        action.add_argument("id", help="the batch id")
        _owner(action)
        action.set_defaults(handler=handler)


def _owner(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--owner",
        default=None,
        help="the namespace the batch belongs to (as the client's owner; default: none, "
        "and any batch can be read)",
    )


def _submit(args: argparse.Namespace) -> int:
    from producer.batches import store
    from producer.client import Client
    from schemas.settings import Settings

    settings = Settings.from_env()
    with Client(settings) as client, args.file.open("rb") as stream:
        batch = store.upload_batch(
            client.sessions,
            stream,
            filename=args.file.name,
            owner=args.owner,
            max_line_bytes=settings.max_body_bytes,
            completion_window=args.window,
            tier=args.tier,
        )
        print(f"batch {batch.id}: {batch.total} lines", file=sys.stderr)
        try:
            _feed(client, batch.id, total=batch.total, done=0)
        except KeyboardInterrupt:
            # The claim was released on the way out: the rest can be sent at once.
            print(_interrupted(batch.id), file=sys.stderr)
            return 130
        _print_batch(client, batch.id)
    return 0


def _print_batch(client: Client, batch_id: str, *, indent: int | None = None) -> None:
    """The batch as OpenAI's API shows it, its status brought up to date, on stdout."""
    from producer.batches import store
    from producer.batches.views import batch_object

    row = store.refresh_batch(client.sessions, batch_id, cancel_batch_jobs=client.cancel_batch_jobs)
    print(json.dumps(batch_object(row), indent=indent))


def _interrupted(batch_id: str) -> str:
    return (
        f"interrupted: batch {batch_id} keeps the lines already sent; "
        f"`llmq batch resume {batch_id}` sends the rest (so does any running gateway)"
    )


def _feed(client: Client, batch_id: str, *, total: int, done: int) -> bool:
    """Send the batch's unsent lines with a progress bar; False if another process
    holds the batch (or nothing is left to send)."""
    import os

    from producer.batches.enqueue import enqueue_batch
    from schemas.progress import ProgressBar

    with ProgressBar("enqueued", total, unit="lines", initial=done) as bar:
        bar.update(done)
        return enqueue_batch(client, batch_id, holder=f"cli:{os.getpid()}", on_progress=bar)


def _resume(args: argparse.Namespace) -> int:
    from producer.batches import store
    from producer.batches.status import BatchStatus
    from producer.client import Client
    from schemas.settings import Settings

    with Client(Settings.from_env()) as client:
        batch = store.get_batch(client.sessions, args.id, owner=args.owner)
        if BatchStatus(batch.status).is_final or batch.enqueued >= batch.total:
            print(f"batch {batch.id} has no line left to send ({batch.status})", file=sys.stderr)
            return 0
        try:
            fed = _feed(client, batch.id, total=batch.total, done=batch.enqueued)
        except KeyboardInterrupt:
            print(_interrupted(batch.id), file=sys.stderr)
            return 130
        if not fed:
            print(
                f"batch {batch.id} is being sent by another process (a gateway or another "
                "llmq batch); it goes on there",
                file=sys.stderr,
            )
            return 1
        _print_batch(client, batch.id)
    return 0


def _status(args: argparse.Namespace) -> int:
    from producer.batches import store
    from producer.client import Client
    from schemas.settings import Settings

    with Client(Settings.from_env(), warm=False) as client:
        batch = store.get_batch(client.sessions, args.id, owner=args.owner)
        _print_batch(client, batch.id, indent=2)
    return 0


def _results(args: argparse.Namespace) -> int:
    from producer.batches import results, store
    from producer.client import Client
    from schemas.settings import Settings

    with Client(Settings.from_env(), warm=False) as client:
        batch = store.get_batch(client.sessions, args.id, owner=args.owner)
        batch = store.refresh_batch(
            client.sessions, batch.id, cancel_batch_jobs=client.cancel_batch_jobs
        )
        with client.sessions() as session:
            for text in results.output_lines(session, batch):
                sys.stdout.write(text + "\n")
            for text in results.error_lines(session, batch):
                sys.stdout.write(text + "\n")
    print(
        f"batch {batch.id} is {batch.status}: {batch.completed} answered, {batch.failed} failed,"
        f" {batch.total} lines",
        file=sys.stderr,
    )
    return 0


def _cancel(args: argparse.Namespace) -> int:
    from producer.batches import store
    from producer.client import Client
    from schemas.settings import Settings

    with Client(Settings.from_env(), warm=False) as client:
        row = store.cancel_batch(
            client.sessions, args.id, owner=args.owner, cancel_batch_jobs=client.cancel_batch_jobs
        )
    print(f"batch {row.id} is {row.status}", file=sys.stderr)
    return 0
