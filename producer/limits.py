"""Context-window checks done at submit, before anything is written or enqueued.

The worker checks again with the exact chat template; this catches the common case
early and cheaply. The count comes from the tier's tokenizer (its ``tokenizer`` setting,
else ``tokenizer.json`` in the model folder); a tier with neither on this host (a hub
id) is counted with a conservative estimate, never skipped.
"""

from __future__ import annotations

import functools
import logging
import re
import string
from pathlib import Path
from typing import TYPE_CHECKING

from schemas.errors import PromptTooLong
from schemas.prompt_registry import PromptRegistry
from schemas.queues import Tier
from schemas.requests import GenerationRequest
from schemas.settings import Settings

if TYPE_CHECKING:
    from tokenizers import Tokenizer

log = logging.getLogger(__name__)

# Role markers and separators the chat template adds around each message.
TEMPLATE_TOKENS_PER_MESSAGE = 5


def check_fits(
    request: GenerationRequest, *, tier: Tier, settings: Settings, system_text: str | None = None
) -> None:
    """Raise ``PromptTooLong`` if ``request`` cannot fit the tier's context window."""
    context = settings.tier(tier).max_model_len
    if request.max_tokens >= context:
        raise PromptTooLong(
            f"max_tokens={request.max_tokens} does not fit the {tier} tier's context "
            f"window of {context} tokens"
        )
    tokenizer_path = tokenizer_file(settings, tier)
    prompt_tokens = estimate_prompt_tokens(request, tokenizer_path, system_text)
    if prompt_tokens is None:
        _warn_estimating(tier)
        prompt_tokens = conservative_token_count(request, system_text)
    if prompt_tokens + request.max_tokens > context:
        raise PromptTooLong(
            f"the prompt is about {prompt_tokens} tokens; with max_tokens={request.max_tokens} "
            f"it exceeds the {tier} tier's context window of {context} tokens"
        )


def tokenizer_file(settings: Settings, tier: Tier) -> Path | None:
    """The tier's configured tokenizer, else its model folder's; None for a hub id."""
    configured = settings.tier(tier).tokenizer
    if configured is not None:
        return configured.expanduser()
    return settings.model_dir(tier)


def estimate_prompt_tokens(
    request: GenerationRequest, tokenizer_path: Path | None, system_text: str | None = None
) -> int | None:
    """Token count of the request's messages, or None if no tokenizer can be loaded.

    ``tokenizer_path`` is a ``tokenizer.json`` file or a folder holding one.
    """
    tokenizer = _load_tokenizer(str(tokenizer_path)) if tokenizer_path is not None else None
    if tokenizer is None:
        return None
    contents = _contents(request, None)
    encoded = tokenizer.encode_batch(contents, add_special_tokens=False) if contents else []
    tokens = sum(len(item.ids) for item in encoded)
    if system_text is not None:
        tokens += _system_prompt_tokens(str(tokenizer_path), system_text)
        contents.append(system_text)
    return tokens + TEMPLATE_TOKENS_PER_MESSAGE * len(contents)


@functools.lru_cache(maxsize=64)
def _system_prompt_tokens(tokenizer_path: str, text: str) -> int:
    """Tokens of a registered system prompt's text, counted once per version: every
    request that names the version sends the same text, often thousands of tokens,
    whose count would otherwise be most of a submit's work on its first token's way."""
    return count_text_tokens(text, Path(tokenizer_path))


def count_text_tokens(text: str, tokenizer_path: Path | None) -> int:
    """Tokens of one text with the tier's tokenizer, else the conservative estimate."""
    tokenizer = _load_tokenizer(str(tokenizer_path)) if tokenizer_path is not None else None
    if tokenizer is None:
        return _estimate(text)
    return len(tokenizer.encode(text, add_special_tokens=False).ids)


def conservative_token_count(request: GenerationRequest, system_text: str | None = None) -> int:
    """An over-estimate of the prompt's tokens for a tier whose tokenizer is not here.

    Per text: a token for every digit, ASCII punctuation mark and space before one of
    those (vocabularies split numbers, codes and dates that finely), one per 3 bytes of
    the remaining ASCII (words: real vocabularies spend 4-5 bytes of English per token)
    and two per CJK character (they take 1-1.6). It is meant to count at least the real
    tokens of prose, code, order numbers, dates, prices and Chinese (docs/operations.md,
    "Tier table"). The price: a prompt near the window's edge
    may be refused early; a tier's ``tokenizer`` setting gives the exact count. Random
    strings (base64) come out below the real count: the worker's exact check still
    catches those.
    """
    contents = _contents(request, system_text)
    return sum(_estimate(text) for text in contents) + TEMPLATE_TOKENS_PER_MESSAGE * len(contents)


_SPACE_BEFORE_FINE = re.compile(r"\s(?=[" + re.escape(string.digits + string.punctuation) + "])")


def _estimate(text: str) -> int:
    # C-speed counting throughout: a prompt can be a megabyte.
    encoded = text.encode()
    ascii_bytes = len(text.encode("ascii", "ignore"))
    fine = sum(encoded.count(byte) for byte in (string.digits + string.punctuation).encode())
    spaces = len(_SPACE_BEFORE_FINE.findall(text))
    words = ascii_bytes - fine - spaces
    other_bytes = len(encoded) - ascii_bytes
    return fine + spaces + -(-words // 3) + -(-(other_bytes * 2) // 3)


def _contents(request: GenerationRequest, system_text: str | None) -> list[str]:
    contents = [message.content for message in request.messages]
    if system_text is not None:
        contents.append(system_text)
    return contents


@functools.lru_cache(maxsize=8)
def _warn_estimating(tier: Tier) -> None:
    # Once per tier and process: the check runs, but a person should know it estimates.
    log.warning(
        "no tokenizer for the %s tier on this host; prompt length is estimated "
        "conservatively (set the tier's 'tokenizer' for an exact count)",
        tier,
    )


def preload_tokenizers(settings: Settings, prompts: PromptRegistry) -> None:
    """Load each configured tier's tokenizer now and count the registered system
    prompts its tier serves with it, so the first request pays for neither."""
    for tier in settings.tiers:
        path = tokenizer_file(settings, tier)
        if path is None or _load_tokenizer(str(path)) is None:
            continue
        for prompt in prompts.for_tier(tier.base):
            _system_prompt_tokens(str(path), prompt.text)


@functools.lru_cache(maxsize=8)
def _load_tokenizer(tokenizer_path: str) -> Tokenizer | None:
    path = Path(tokenizer_path)
    if path.is_dir():
        path = path / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        return Tokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - a broken file falls back to the estimate
        log.warning("cannot load tokenizer %s; prompt length is estimated instead", path)
        return None
