"""Gateway API keys: created once, shown once, stored as a SHA-256 hash."""

from __future__ import annotations

import hashlib
import secrets
import uuid
from dataclasses import dataclass
from datetime import datetime

from sqlalchemy import select
from sqlalchemy.orm import Session, sessionmaker

from schemas.boundary import database_boundary
from schemas.errors import KeyNotFound
from schemas.tables import ApiKey, as_utc, utcnow
from schemas.timeouts import DEFAULT_TIMEOUTS

KEY_PREFIX = "llmq-"
DEFAULT_RATE_LIMIT_PER_MIN = 600
KEY_CACHE_S = DEFAULT_TIMEOUTS.key_cache_s
"""How long a gateway trusts a key it has checked, unless told
(``settings.timeouts.key_cache_s``); a revoked key is refused after it."""


@dataclass(frozen=True)
class KeyIdentity:
    """Who is calling: the key's id (which owns jobs), name and limit."""

    id: str
    name: str
    rate_limit_per_min: int


@dataclass(frozen=True)
class KeyInfo:
    """What may be shown about a key: never its secret, nor its hash."""

    id: str
    name: str
    rate_limit_per_min: int
    created_at: datetime
    revoked_at: datetime | None


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


def list_keys(sessions: sessionmaker[Session]) -> list[KeyInfo]:
    """Every key, oldest first, revoked ones included; raises ``DatabaseUnavailable``."""
    with database_boundary("list the API keys"), sessions() as session:
        keys = session.scalars(select(ApiKey).order_by(ApiKey.created_at, ApiKey.id)).all()
        return [_info(key) for key in keys]


def revoke_key(sessions: sessionmaker[Session], key_id: str) -> tuple[KeyInfo, bool]:
    """Revoke a key; return it and whether this call revoked it (False: it already was).

    A gateway refuses it as soon as its key cache forgets the key (within
    ``settings.timeouts.key_cache_s``). Raises ``KeyNotFound`` or ``DatabaseUnavailable``.
    """
    with database_boundary("revoke the API key"), sessions.begin() as session:
        key = session.get(ApiKey, key_id)
        if key is None:
            raise KeyNotFound(f"no API key with id {key_id!r} (see: llmq keys list)")
        newly = key.revoked_at is None
        if newly:
            key.revoked_at = utcnow()
        return _info(key), newly


def _info(key: ApiKey) -> KeyInfo:
    return KeyInfo(
        id=key.id,
        name=key.name,
        rate_limit_per_min=key.rate_limit_per_min,
        created_at=as_utc(key.created_at),
        revoked_at=None if key.revoked_at is None else as_utc(key.revoked_at),
    )
