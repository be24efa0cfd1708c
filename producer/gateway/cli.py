"""``llmq gateway``, ``llmq keys`` and ``llmq flower``."""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from producer.keys import KeyInfo


def register_gateway(commands: Any) -> None:
    """Add ``llmq gateway [--host H] [--port P]``."""
    gateway = commands.add_parser("gateway", help="run the OpenAI-compatible HTTP gateway")
    gateway.add_argument("--host", default="127.0.0.1")
    gateway.add_argument("--port", type=int, default=8000)
    gateway.add_argument(
        "--no-auth", action="store_true", help="accept calls without an API key (local use only)"
    )
    gateway.set_defaults(handler=_gateway)


def _gateway(args: argparse.Namespace) -> int:
    import uvicorn

    from producer.gateway.app import create_app
    from schemas.settings import Settings

    app = create_app(Settings.from_env(), require_keys=not args.no_auth)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def register_keys(commands: Any) -> None:
    """Add ``llmq keys create NAME``, ``llmq keys list`` and ``llmq keys revoke ID``."""
    keys = commands.add_parser("keys", help="gateway API keys")
    actions = keys.add_subparsers(title="actions", metavar="ACTION", required=True)
    create = actions.add_parser("create", help="create a key and print it (shown only once)")
    create.add_argument("name", help="who the key is for")
    create.add_argument("--rate-limit", type=int, default=600, help="requests per minute")
    create.set_defaults(handler=_create_key)
    listing = actions.add_parser("list", help="every key: id, name, created, revoked, limit")
    listing.set_defaults(handler=_list_keys)
    revoke = actions.add_parser(
        "revoke", help="revoke a key; gateways refuse it within their key cache's lifetime"
    )
    revoke.add_argument("id", help="the key's id, as `llmq keys list` shows it")
    revoke.set_defaults(handler=_revoke_key)


def _create_key(args: argparse.Namespace) -> int:
    from producer.keys import create_key
    from schemas.db import make_engine, make_sessions
    from schemas.settings import Settings

    engine = make_engine(Settings.from_env().database_url)
    try:
        identity, secret = create_key(
            make_sessions(engine), args.name, rate_limit_per_min=args.rate_limit
        )
    finally:
        engine.dispose()
    print(secret)
    print(
        f"key {identity.id} for {identity.name!r}: store it now, it is not shown again",
        file=sys.stderr,
    )
    return 0


def _list_keys(_args: argparse.Namespace) -> int:
    from producer.keys import list_keys
    from schemas.db import make_engine, make_sessions
    from schemas.settings import Settings

    engine = make_engine(Settings.from_env().database_url)
    try:
        keys = list_keys(make_sessions(engine))
    finally:
        engine.dispose()
    print(format_keys(keys))
    return 0


def format_keys(keys: Sequence[KeyInfo]) -> str:
    """A table of keys for people; secrets are never stored, so never shown."""
    rows = [("ID", "NAME", "CREATED", "REVOKED", "RATE/MIN")]
    rows += [
        (
            key.id,
            key.name,
            _when(key.created_at),
            _when(key.revoked_at) if key.revoked_at else "-",
            str(key.rate_limit_per_min),
        )
        for key in keys
    ]
    if not keys:
        return "no API keys (create one: llmq keys create NAME)"
    widths = [max(len(row[column]) for row in rows) for column in range(len(rows[0]))]
    return "\n".join(
        "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        for row in rows
    )


def _when(moment: datetime) -> str:
    return moment.strftime("%Y-%m-%d %H:%M:%SZ")


def _revoke_key(args: argparse.Namespace) -> int:
    from producer.keys import KEY_CACHE_S, revoke_key
    from schemas.db import make_engine, make_sessions
    from schemas.settings import Settings

    engine = make_engine(Settings.from_env().database_url)
    try:
        key, newly = revoke_key(make_sessions(engine), args.id)
    finally:
        engine.dispose()
    if newly:
        print(f"revoked key {key.id} ({key.name!r}); gateways refuse it within {KEY_CACHE_S:g} s")
    else:
        assert key.revoked_at is not None
        print(f"key {key.id} ({key.name!r}) was already revoked at {_when(key.revoked_at)}")
    return 0


def register_flower(commands: Any) -> None:
    """Add ``llmq flower [--port P]``."""
    flower = commands.add_parser("flower", help="run Flower on the llmq broker and queues")
    flower.add_argument("--port", type=int, default=5555)
    flower.add_argument("--address", default="127.0.0.1")
    flower.add_argument(
        "--basic-auth", default=None, help="user:password for the UI and API (recommended)"
    )
    flower.set_defaults(handler=_flower)


def _flower(args: argparse.Namespace) -> int:
    from schemas.settings import Settings

    broker = Settings.from_env().broker_url
    command = flower_command(broker, port=args.port, address=args.address)
    if args.basic_auth:
        command.append(f"--basic-auth={args.basic_auth}")
    else:
        # Without credentials Flower refuses its HTTP API; on the default loopback
        # address that is safe to open, anywhere else pass --basic-auth.
        os.environ.setdefault("FLOWER_UNAUTHENTICATED_API", "true")
    os.execvp(command[0], command)
    return 0  # pragma: no cover - exec does not return


def flower_command(broker_url: str, *, port: int, address: str) -> list[str]:
    """The ``celery flower`` command line; the broker tab lists the queues workers consume."""
    return [
        sys.executable,
        "-m",
        "celery",
        f"--broker={broker_url}",
        "flower",
        f"--port={port}",
        f"--address={address}",
        "--purge_offline_workers=60",
    ]
