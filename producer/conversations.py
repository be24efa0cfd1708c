"""Conversations as a producer sees them: tagging a request, reading turns and summaries.

A conversation belongs to the owner that submitted its jobs (the gateway's API key
id; '' for none). Every read here is scoped by owner: another owner's conversation of
the same id does not exist for the caller.
"""

from __future__ import annotations

import argparse
import json
import sys
from datetime import date
from typing import Any

from pydantic import ValidationError
from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from producer.submission import RequestLike, describe_validation_error, parse_request
from schemas.boundary import database_boundary
from schemas.errors import InvalidRequest, JobNotFound
from schemas.requests import GenerationRequest
from schemas.tables import Conversation, Summary, Turn


class ConversationNotFound(JobNotFound):
    """No conversation of that id for this owner (HTTP 404)."""


def with_conversation(request: RequestLike, conversation_id: str) -> GenerationRequest:
    """``request`` tagged with ``conversation_id``; raises ``InvalidRequest``.

    A request that already names a different conversation is refused rather than
    silently moved.
    """
    parsed = parse_request(request)
    if parsed.conversation_id not in (None, conversation_id):
        raise InvalidRequest(
            f"the request names conversation {parsed.conversation_id!r} and the option "
            f"{conversation_id!r}; give one"
        )
    try:
        return GenerationRequest.model_validate(
            {**parsed.model_dump(), "conversation_id": conversation_id}
        )
    except ValidationError as exc:  # the id itself (too long, odd characters)
        raise InvalidRequest(f"invalid conversation id: {describe_validation_error(exc)}") from exc


def _check_id(conversation_id: str) -> None:
    """Raise ``ConversationNotFound`` for an id no conversation can have (a NUL, a lone
    surrogate), which the database would refuse to compare (a 503 for a missing row)."""
    try:
        conversation_id.encode("utf-8")
    except UnicodeEncodeError:
        raise ConversationNotFound(f"no conversation with id {conversation_id!r}") from None
    if "\x00" in conversation_id:
        raise ConversationNotFound(f"no conversation with id {conversation_id!r}")


def load_summaries(
    sessions: sessionmaker[Session],
    conversation_id: str,
    *,
    owner: str | None,
    day: date | None = None,
) -> list[Summary]:
    """The conversation's summaries, oldest day first; raises ``ConversationNotFound``.

    ``owner`` None is the owner-less namespace, not "any owner".
    """
    scope = owner or ""
    _check_id(conversation_id)
    with database_boundary("read the conversation's summaries"), sessions() as session:
        exists = session.get(Conversation, (scope, conversation_id))
        if exists is None:
            raise ConversationNotFound(f"no conversation with id {conversation_id!r}")
        query = select(Summary).where(
            Summary.owner == scope, Summary.conversation_id == conversation_id
        )
        if day is not None:
            query = query.where(Summary.day == day)
        return list(session.scalars(query.order_by(Summary.day)))


def load_turns(
    sessions: sessionmaker[Session], conversation_id: str, *, owner: str | None
) -> list[Turn]:
    """The conversation's turns in order; raises ``ConversationNotFound``."""
    scope = owner or ""
    _check_id(conversation_id)
    with database_boundary("read the conversation"), sessions() as session:
        if session.get(Conversation, (scope, conversation_id)) is None:
            raise ConversationNotFound(f"no conversation with id {conversation_id!r}")
        return list(
            session.scalars(
                select(Turn)
                .where(Turn.owner == scope, Turn.conversation_id == conversation_id)
                .order_by(Turn.seq)
            )
        )


def summary_view(summary: Summary) -> dict[str, object]:
    """A summary as the gateway and ``llmq summaries show`` present it."""
    return {
        "conversation_id": summary.conversation_id,
        "day": summary.day.isoformat(),
        "status": summary.status,
        "text": summary.text,
        "tier": summary.tier,
        "model": summary.model,
        "usage": {"prompt_tokens": summary.prompt_tokens, "output_tokens": summary.output_tokens},
        "attempts": summary.attempts,
        "error": summary.error,
        "created_at": summary.created_at.isoformat(),
        "finished_at": summary.finished_at.isoformat() if summary.finished_at else None,
    }


def register_summaries(commands: Any) -> None:
    """Add ``llmq summaries show CONVERSATION_ID [--owner KEY_ID] [--json]``."""
    summaries = commands.add_parser("summaries", help="read conversation summaries")
    actions = summaries.add_subparsers(title="actions", metavar="ACTION", required=True)
    show = actions.add_parser("show", help="a conversation's summaries, one per day")
    show.add_argument("conversation_id")
    show.add_argument(
        "--owner", default=None, help="the API key id that owns it (default: no owner)"
    )
    show.add_argument("--json", action="store_true", help="one JSON object per summary")
    show.set_defaults(handler=_show)


def _show(args: argparse.Namespace) -> int:
    from schemas.db import make_engine, make_sessions
    from schemas.settings import Settings

    engine = make_engine(Settings.from_env().database_url)
    try:
        found = load_summaries(make_sessions(engine), args.conversation_id, owner=args.owner)
    finally:
        engine.dispose()
    for summary in found:
        if args.json:
            print(json.dumps(summary_view(summary)))
            continue
        usage = f"{summary.prompt_tokens}+{summary.output_tokens} tokens"
        print(f"{summary.day}  {summary.status}  {summary.tier}  {usage}")
        print(f"  {summary.text if summary.status == 'done' else summary.error or '(pending)'}")
    if not found:
        print(f"conversation {args.conversation_id} has no summaries yet", file=sys.stderr)
    return 0
