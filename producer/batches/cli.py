"""``llmq batch submit|status|results|cancel``: the Batch API without the gateway."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from schemas.queues import Tier


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
    import os

    from producer.batches import store
    from producer.batches.enqueue import enqueue_batch
    from producer.batches.views import batch_object
    from producer.client import Client
    from schemas.progress import ProgressBar
    from schemas.settings import Settings

    settings = Settings.from_env()
    with Client(settings) as client, args.file.open("rb") as stream:
        uploaded = store.create_file(
            client.sessions,
            stream,
            filename=args.file.name,
            purpose=store.INPUT_PURPOSE,
            owner=args.owner,
            max_line_bytes=settings.max_body_bytes,
        )
        batch = store.create_batch(
            client.sessions,
            input_file_id=uploaded.id,
            endpoint="/v1/chat/completions",
            completion_window=args.window,
            owner=args.owner,
            tier=args.tier,
        )
        print(f"batch {batch.id}: {batch.total} lines", file=sys.stderr)
        # Interrupted, the batch is not lost: a gateway's batch runner resumes it.
        with ProgressBar("enqueued", batch.total, unit="lines") as bar:
            bar.update(0)
            enqueue_batch(client, batch.id, holder=f"cli:{os.getpid()}", on_progress=bar)
        row = store.refresh_batch(client.sessions, batch.id, cancel_job=client.cancel)
        print(json.dumps(batch_object(row)))
    return 0


def _status(args: argparse.Namespace) -> int:
    from producer.batches import store
    from producer.batches.views import batch_object
    from producer.client import Client
    from schemas.settings import Settings

    with Client(Settings.from_env(), warm=False) as client:
        batch = store.get_batch(client.sessions, args.id, owner=args.owner)
        row = store.refresh_batch(client.sessions, batch.id, cancel_job=client.cancel)
    print(json.dumps(batch_object(row), indent=2))
    return 0


def _results(args: argparse.Namespace) -> int:
    from producer.batches import store
    from producer.client import Client
    from schemas.settings import Settings

    with Client(Settings.from_env(), warm=False) as client:
        batch = store.get_batch(client.sessions, args.id, owner=args.owner)
        batch = store.refresh_batch(client.sessions, batch.id, cancel_job=client.cancel)
        with client.sessions() as session:
            for text in store.output_lines(session, batch):
                sys.stdout.write(text + "\n")
            for text in store.error_lines(session, batch):
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
            client.sessions, args.id, owner=args.owner, cancel_job=client.cancel
        )
    print(f"batch {row.id} is {row.status}", file=sys.stderr)
    return 0
