"""Context-window checks done at submit, before anything is written or enqueued.

The worker checks again with the exact chat template; this catches the common case
early and cheaply, with the tier's own tokenizer when its files are on this host.
"""

from __future__ import annotations

import functools
import logging
from pathlib import Path
from typing import TYPE_CHECKING

from schemas.errors import PromptTooLong
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
    prompt_tokens = estimate_prompt_tokens(request, settings.model_dir(tier), system_text)
    if prompt_tokens is not None and prompt_tokens + request.max_tokens > context:
        raise PromptTooLong(
            f"the prompt is about {prompt_tokens} tokens; with max_tokens={request.max_tokens} "
            f"it exceeds the {tier} tier's context window of {context} tokens"
        )


def estimate_prompt_tokens(
    request: GenerationRequest, model_dir: Path | None, system_text: str | None = None
) -> int | None:
    """Token count of the request's messages, or None if the tokenizer is not on this host."""
    tokenizer = _load_tokenizer(str(model_dir)) if model_dir is not None else None
    if tokenizer is None:
        return None
    contents = [message.content for message in request.messages]
    if system_text is not None:
        contents.append(system_text)
    encoded = tokenizer.encode_batch(contents, add_special_tokens=False)
    return sum(len(item.ids) for item in encoded) + TEMPLATE_TOKENS_PER_MESSAGE * len(contents)


def preload_tokenizer(model_dir: Path | None) -> None:
    """Load a tier's tokenizer ahead of the first request (it takes ~100 ms)."""
    if model_dir is not None:
        _load_tokenizer(str(model_dir))


@functools.lru_cache(maxsize=8)
def _load_tokenizer(model_dir: str) -> Tokenizer | None:
    path = Path(model_dir) / "tokenizer.json"
    if not path.is_file():
        return None
    try:
        from tokenizers import Tokenizer
    except ImportError:
        return None
    try:
        return Tokenizer.from_file(str(path))
    except Exception:  # noqa: BLE001 - a broken file only disables the early check
        log.warning("cannot load tokenizer %s; prompt length is checked by the worker", path)
        return None
