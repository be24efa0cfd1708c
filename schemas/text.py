"""Checks on text that llmq stores: what a database column can hold."""

from __future__ import annotations


def valid_unicode(value: str) -> str:
    """``value`` if it encodes as UTF-8; a lone surrogate (which JSON's ``\\ud800``
    escape produces) can be neither hashed, stored nor tokenized, so it is refused."""
    try:
        value.encode("utf-8")
    except UnicodeEncodeError as exc:
        raise ValueError(
            f"text must be valid Unicode: a lone surrogate at position {exc.start}"
        ) from None
    return value


def database_text(value: str | None) -> str | None:
    """``value`` if a database text column can hold it: valid Unicode and no NUL."""
    if value is None:
        return None
    if "\x00" in value:
        raise ValueError("text must not contain NUL characters")
    return valid_unicode(value)
