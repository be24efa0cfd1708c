"""``llmq db``: bring the job database up to date."""

from __future__ import annotations

import argparse
from typing import Any


def register(commands: Any) -> None:
    """Add ``llmq db upgrade`` and ``llmq db downgrade``."""
    db = commands.add_parser("db", help="job database migrations")
    actions = db.add_subparsers(title="actions", metavar="ACTION", required=True)
    upgrade = actions.add_parser("upgrade", help="migrate to the newest revision")
    upgrade.add_argument("revision", nargs="?", default="head")
    upgrade.set_defaults(handler=_upgrade)
    downgrade = actions.add_parser("downgrade", help="migrate back to a revision")
    downgrade.add_argument("revision")
    downgrade.set_defaults(handler=_downgrade)


def _upgrade(args: argparse.Namespace) -> int:
    from migrations import upgrade
    from schemas.settings import Settings

    settings = Settings.from_env()
    upgrade(settings.database_url, args.revision)
    print(f"database at {args.revision}: {_safe(settings.database_url)}")
    return 0


def _downgrade(args: argparse.Namespace) -> int:
    from migrations import downgrade
    from schemas.settings import Settings

    settings = Settings.from_env()
    downgrade(settings.database_url, args.revision)
    print(f"database at {args.revision}: {_safe(settings.database_url)}")
    return 0


def _safe(url: str) -> str:
    from sqlalchemy.engine import make_url

    return make_url(url).render_as_string(hide_password=True)
