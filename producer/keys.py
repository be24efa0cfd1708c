"""Gateway API keys: created once, shown once, stored as a SHA-256 hash."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from schemas.boundary import database_boundary
from schemas.tables import ApiKey, utcnow

KEY_PREFIX = "llmq-"
DEFAULT_RATE_LIMIT_PER_MIN = 600


@dataclass(frozen=True)
class KeyIdentity:
    """Who is calling: the key's id (which owns jobs), name and limit."""

    id: str
    name: str
    rate_limit_per_min: int


def hash_secret(secret: str) -> str:
    """The stored form of a key; keys are long random tokens, so a plain hash suffices."""
    return hashlib.sha256(secret.encode()).hexdigest()


def create_key(
    sessions: sessionmaker[Session],
    name: str,
    *,
    rate_limit_per_min: int = DEFAULT_RATE_LIMIT_PER_MIN,
) -> tuple[KeyIdentity, str]:
    """Create a key; return its identity and the secret, which is never stored."""
    secret = KEY_PREFIX + secrets.token_urlsafe(32)
    key = ApiKey(
        id=uuid.uuid4().hex,
        name=name,
        key_hash=hash_secret(secret),
        rate_limit_per_min=rate_limit_per_min,
        created_at=utcnow(),
    )
    with database_boundary("store the key"), sessions.begin() as session:
        session.add(key)
    return KeyIdentity(key.id, key.name, key.rate_limit_per_min), secret


def authenticate(sessions: sessionmaker[Session], secret: str) -> KeyIdentity | None:
    """The identity behind ``secret``, or None if it is unknown or revoked."""
    with database_boundary("check the API key"), sessions() as session:
        key = session.scalars(
            select(ApiKey).where(ApiKey.key_hash == hash_secret(secret))
        ).one_or_none()
    if key is None or key.revoked_at is not None:
        return None
    return KeyIdentity(key.id, key.name, key.rate_limit_per_min)
