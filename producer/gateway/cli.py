"""``llmq gateway``, ``llmq keys`` and ``llmq flower``."""

from __future__ import annotations

import argparse
import ipaddress
import os
import sys
from collections.abc import Mapping, Sequence
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schemas.errors import ConfigError

if TYPE_CHECKING:
    from producer.gateway.keys import KeyInfo


def register_gateway(commands: Any) -> None:
    """Add ``llmq gateway [--host H] [--port P]``."""
    gateway = commands.add_parser("gateway", help="run the OpenAI-compatible HTTP gateway")
    gateway.add_argument("--host", default="127.0.0.1")
    gateway.add_argument("--port", type=int, default=8000)
    gateway.add_argument(
        "--no-auth", action="store_true", help="accept calls without an API key (local use only)"
    )
    gateway.set_defaults(handler=_gateway)


# Not a setting: an interpreter tuning of the gateway process, not a wait. Bulk work
# runs in threads (uploads parsed, downloads read, batches fed, keys checked); with the
# default 5 ms switch interval, the event loop that streams everyone's tokens waits up
# to that long for the interpreter each time it wakes while one of them computes.
GIL_SWITCH_INTERVAL_S = 0.0005


def _gateway(args: argparse.Namespace) -> int:
    import uvicorn

    from producer.gateway.app import create_app
    from schemas.settings import Settings

    check_auth_exposure(args.host, no_auth=args.no_auth)
    app = create_app(Settings.from_env(), require_keys=not args.no_auth)
    sys.setswitchinterval(GIL_SWITCH_INTERVAL_S)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0


def check_auth_exposure(host: str, *, no_auth: bool) -> None:
    """Refuse ``--no-auth`` off a loopback address: without keys every caller is one
    tenant, and anyone who can reach the port would read every job, stream and batch.
    Raises ``ConfigError``."""
    if no_auth and not is_loopback(host):
        raise ConfigError(
            f"--no-auth serves without API keys: it is allowed on a loopback address "
            f"only, not {host} (create a key with: llmq keys create NAME)"
        )


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
    from producer.gateway.keys import create_key
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
    from producer.gateway.keys import list_keys
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
    from producer.gateway.keys import revoke_key
    from schemas.db import make_engine, make_sessions
    from schemas.settings import Settings

    settings = Settings.from_env()
    engine = make_engine(settings.database_url)
    try:
        key, newly = revoke_key(make_sessions(engine), args.id)
    finally:
        engine.dispose()
    if newly:
        within = settings.timeouts.key_cache_s
        print(f"revoked key {key.id} ({key.name!r}); gateways refuse it within {within:g} s")
    else:
        assert key.revoked_at is not None
        print(f"key {key.id} ({key.name!r}) was already revoked at {_when(key.revoked_at)}")
    return 0


BASIC_AUTH_ENV = "LLMQ_FLOWER_BASIC_AUTH"


def register_flower(commands: Any) -> None:
    """Add ``llmq flower [--address A] [--port P] [--basic-auth-file PATH]``."""
    flower = commands.add_parser(
        "flower",
        help="run Flower on the llmq broker and queues",
        description=(
            "Flower on the llmq broker. Off the loopback address it needs credentials:"
            f" {BASIC_AUTH_ENV}=user:password in the environment, or --basic-auth-file."
        ),
    )
    flower.add_argument("--port", type=int, default=5555)
    flower.add_argument("--address", default="127.0.0.1")
    flower.add_argument(
        "--basic-auth-file",
        type=Path,
        default=None,
        metavar="PATH",
        help=f"a file holding user:password (else {BASIC_AUTH_ENV} is read)",
    )
    # Refused with a message: an argument shows in `ps` to every user of the host.
    flower.add_argument("--basic-auth", default=None, help=argparse.SUPPRESS)
    flower.set_defaults(handler=_flower)


def _flower(args: argparse.Namespace) -> int:
    from schemas.settings import Settings

    if args.basic_auth is not None:
        raise ConfigError(
            "--basic-auth is no longer accepted: process arguments are visible to every"
            f" user of the host; set {BASIC_AUTH_ENV}=user:password or pass --basic-auth-file"
        )
    credentials = flower_basic_auth(os.environ, file=args.basic_auth_file)
    command, env = flower_launch(
        Settings.from_env().broker_url,
        port=args.port,
        address=args.address,
        basic_auth=credentials,
        env=os.environ,
    )
    os.execvpe(command[0], command, env)
    return 0  # pragma: no cover - exec does not return


def flower_basic_auth(env: Mapping[str, str], *, file: Path | None = None) -> str | None:
    """Flower's credentials, ``user:password[,user2:password2]``, or None if none are set.

    From ``file`` when given, else ``LLMQ_FLOWER_BASIC_AUTH`` (or Flower's own
    ``FLOWER_BASIC_AUTH``). Raises ``ConfigError`` for an unreadable file or a value that
    is not ``user:password`` pairs; the message never repeats the value.
    """
    if file is not None:
        try:
            value = file.read_text().strip()
        except OSError as exc:
            raise ConfigError(f"cannot read the Flower credentials file {file}") from exc
        where = f"the credentials file {file}"
    else:
        value = (env.get(BASIC_AUTH_ENV) or env.get("FLOWER_BASIC_AUTH") or "").strip()
        where = BASIC_AUTH_ENV
        if not value:
            return None
    for pair in value.split(","):
        user, sep, password = pair.partition(":")
        if not (sep and user.strip() and password):
            raise ConfigError(f"{where} must hold user:password (several joined by commas)")
    return value


def flower_launch(
    broker_url: str,
    *,
    port: int,
    address: str,
    basic_auth: str | None,
    env: Mapping[str, str],
) -> tuple[list[str], dict[str, str]]:
    """The ``celery flower`` command and its environment.

    The broker URL and the credentials travel in the environment, never in the
    arguments (anyone on the host can read those in ``ps``). Off a loopback address,
    Flower without credentials (or a Flower auth provider) is refused with
    ``ConfigError``: it would show every job and let anyone shut workers down.
    """
    child = dict(env)
    child["CELERY_BROKER_URL"] = broker_url
    if basic_auth is not None:
        child["FLOWER_BASIC_AUTH"] = basic_auth
        child.pop("FLOWER_UNAUTHENTICATED_API", None)
    elif child.get("FLOWER_AUTH_PROVIDER"):
        pass  # Flower's own OAuth provider guards it
    elif is_loopback(address):
        # Without credentials Flower refuses its HTTP API; on loopback that is safe to open.
        child.setdefault("FLOWER_UNAUTHENTICATED_API", "true")
    else:
        raise ConfigError(
            f"refusing to serve Flower on {address} without authentication: set"
            f" {BASIC_AUTH_ENV}=user:password or pass --basic-auth-file PATH"
            " (or keep --address 127.0.0.1)"
        )
    return flower_command(port=port, address=address), child


def is_loopback(address: str) -> bool:
    """Whether ``address`` is reachable only from this host."""
    if address.strip().lower() == "localhost":
        return True
    try:
        return ipaddress.ip_address(address.strip("[]")).is_loopback
    except ValueError:
        return False  # a host name other than localhost may resolve anywhere


def flower_command(*, port: int, address: str) -> list[str]:
    """The command that runs Flower (``producer.gateway.flower_run``); the broker comes
    from ``CELERY_BROKER_URL``."""
    return [
        sys.executable,
        "-m",
        "producer.gateway.flower_run",
        f"--port={port}",
        f"--address={address}",
        "--purge_offline_workers=60",
    ]
