"""Recording a finished job of a conversation as its turns.

Called inside the transaction that writes the job's output, so a job's turns exist
exactly when its row says done: a retried or superseded attempt writes nothing.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from sqlalchemy import func, select, update
from sqlalchemy.dialects import postgresql, sqlite
from sqlalchemy.orm import Session

from schemas.tables import Conversation, Job, Turn, utcnow


def new_turns(request: dict[str, Any], answer: str) -> list[tuple[str, str]]:
    """The (role, content) turns a finished request adds to its conversation.

    A caller resends the whole history with each request, so only the user messages
    after its last assistant message are new; then the answer. System messages are
    instructions, not turns.
    """
    messages = [m for m in request.get("messages", []) if isinstance(m, dict)]
    last_answer = max(
        (index for index, m in enumerate(messages) if m.get("role") == "assistant"), default=-1
    )
    turns = [
        ("user", str(m.get("content", "")))
        for m in messages[last_answer + 1 :]
        if m.get("role") == "user"
    ]
    turns.append(("assistant", answer))
    return turns


def in_conversation(request: Mapping[str, object]) -> bool:
    """Whether a job's request belongs to a conversation (its turns are recorded)."""
    conversation_id = request.get("conversation_id")
    return isinstance(conversation_id, str) and bool(conversation_id)


def record_turns(session: Session, job: Job, *, answer: str, answer_tokens: int | None) -> int:
    """Append ``job``'s new turns to its conversation (created if new); return how many.

    Nothing is written for a job without a ``conversation_id``. The conversation is
    the job owner's ('' for none): another owner's conversation of the same id is a
    different row. Sequence numbers are assigned under a lock on the conversation row,
    so concurrent jobs of one conversation never take the same number.
    """
    if not in_conversation(job.request):
        return 0
    conversation_id = str(job.request["conversation_id"])
    owner = job.owner or ""
    now = utcnow()
    _ensure_conversation(session, owner, conversation_id, now)
    session.execute(
        select(Conversation.id)
        .where(Conversation.owner == owner, Conversation.id == conversation_id)
        .with_for_update()
    )
    last = session.scalar(
        select(func.max(Turn.seq)).where(
            Turn.owner == owner, Turn.conversation_id == conversation_id
        )
    )
    turns = new_turns(job.request, answer)
    for offset, (role, content) in enumerate(turns, start=1):
        session.add(
            Turn(
                owner=owner,
                conversation_id=conversation_id,
                job_id=job.id,
                seq=(last or 0) + offset,
                role=role,
                content=content,
                tokens=answer_tokens if role == "assistant" else None,
                created_at=now,
            )
        )
    session.execute(
        update(Conversation)
        .where(Conversation.owner == owner, Conversation.id == conversation_id)
        .values(updated_at=now)
    )
    return len(turns)


def _ensure_conversation(session: Session, owner: str, conversation_id: str, now: Any) -> None:
    values = {"owner": owner, "id": conversation_id, "created_at": now, "updated_at": now}
    dialect = session.get_bind().dialect.name
    insert = postgresql.insert if dialect == "postgresql" else sqlite.insert
    session.execute(insert(Conversation).values(**values).on_conflict_do_nothing())
