"""How the mixed bench calls a side: where, as which model, with what extras."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from bench.trace import Event


@dataclass(frozen=True)
class Target:
    """How one side is called: where, as which model, and what each request adds."""

    base_url: str
    api_key: str
    interactive_model: str
    batch_model: str
    # Registered prompts by reference -> text, for a side that needs the text sent.
    inline_prompts: dict[str, str] | None
    batch_extra: dict[str, Any] = field(default_factory=dict)
    batch_cap: int | None = None
    """The most batch requests the client keeps in flight at once (None: no cap); a
    batch request over it waits in the client, as a capped bulk job would."""


def request_arguments(target: Target, event: Event) -> dict[str, Any]:
    """The ``chat.completions.create`` keywords of ``event`` for ``target``."""
    messages = [dict(m) for m in event.messages]
    extra: dict[str, Any] = {}
    if event.system_prompt is not None:
        if target.inline_prompts is not None:
            text = target.inline_prompts[event.system_prompt]
            messages.insert(0, {"role": "system", "content": text})
        else:
            extra["system_prompt"] = event.system_prompt
    if event.kind == "batch":
        extra.update(target.batch_extra)
    arguments: dict[str, Any] = {
        "model": target.batch_model if event.kind == "batch" else target.interactive_model,
        "messages": messages,
        "max_tokens": event.max_tokens,
        "temperature": 0.0,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if extra:
        arguments["extra_body"] = extra
    return arguments
