"""OpenAI's legacy text completions (``POST /v1/completions``), as vLLM's server serves
them: the request the gateway accepts, and the ``text_completion`` objects (whole and
streamed) it returns. The prompt is continued as it is (no chat template): the job
carries it as a raw prompt (``GenerationRequest.raw_prompt``).

Shapes only: nothing here opens a job or knows HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from pydantic import (
    Field,
    ValidationInfo,
    field_validator,
)
from pydantic_core import PydanticCustomError

from producer.gateway.protocol.common import (
    JobAnswer,
    OpenAiGenerationRequest,
    asks_for_nothing,
    stream_chunk,
    whole_answer,
)
from schemas.errors import InvalidRequest
from schemas.events import ChoiceOutput, TokenLogprob, Usage
from schemas.sampling import MAX_TOP_LOGPROBS

DEFAULT_MAX_TOKENS = 16
"""OpenAI's and vLLM's default for a text completion (a chat answer's is llmq's 256)."""

# Fields a text completion defines that llmq serves only at the value that asks for
# nothing: the prompt back in the answer, text after the insertion point, and a best
# of several answers (each a second generation).
_QUIET: dict[str, tuple[object, ...]] = {
    "echo": (False,),
    "suffix": ("",),
    "best_of": (1,),
}


class CompletionRequest(OpenAiGenerationRequest):
    """``POST /v1/completions``.

    As for chat, every field is served, or refused by name when it asks for something
    llmq does not serve; a field nobody defines is refused by name too.
    """

    prompt: Any
    logprobs: int | None = Field(default=None, ge=0, le=MAX_TOP_LOGPROBS, strict=True)
    # Refused unless they ask for nothing (_QUIET).
    echo: Any = None
    suffix: Any = None
    best_of: Any = None

    @field_validator("prompt")
    @classmethod
    def _one_text_prompt(cls, value: object) -> str:
        if isinstance(value, list) and len(value) == 1 and isinstance(value[0], str):
            value = value[0]
        if isinstance(value, list) and all(isinstance(item, str) for item in value):
            raise PydanticCustomError(
                "unserved_field",
                "llmq serves one prompt per request, not {count}: send each as its own request",
                {"count": len(value)},
            )
        if not isinstance(value, str):
            raise PydanticCustomError(
                "unserved_field", "llmq serves a prompt as text (a string), not token ids", {}
            )
        if not value.strip():
            raise ValueError("the prompt must not be empty")
        if "\x00" in value:
            raise ValueError("the prompt must not contain NUL characters")
        return value

    @field_validator(*_QUIET)
    @classmethod
    def _asks_for_nothing(cls, value: object, info: ValidationInfo) -> object:
        name = info.field_name or ""
        return asks_for_nothing(name, value, _QUIET[name])

    @property
    def text(self) -> str:
        """The prompt (validated to one string)."""
        assert isinstance(self.prompt, str)
        return self.prompt

    def check_bounds(self, *, max_message_chars: int) -> None:
        """Raise ``InvalidRequest`` for a prompt longer than a message may be."""
        if len(self.text) > max_message_chars:
            raise InvalidRequest(
                f"prompt is {len(self.text)} characters long, "
                f"at most {max_message_chars} are accepted"
            )

    def to_llmq(self) -> dict[str, Any]:
        """The equivalent llmq request (validated later by ``GenerationRequest``)."""
        request: dict[str, Any] = {
            "messages": [{"role": "user", "content": self.text}],
            "raw_prompt": True,
            "max_tokens": self.max_tokens if self.max_tokens is not None else DEFAULT_MAX_TOKENS,
        }
        optional = {
            "temperature": self.temperature,
            "top_p": self.top_p,
            "seed": self.seed,
            "metadata": self.metadata,
            "stop": [self.stop] if isinstance(self.stop, str) else self.stop,
            "user": self.user,
            "sampling": self._sampling() or None,
            "n": self.n if self.n > 1 else None,
        }
        request.update({k: v for k, v in optional.items() if v is not None})
        return request

    def _sampling(self) -> dict[str, Any]:
        return self.sampling_fields(logprobs=self.logprobs)


def completion_id(job_id: str) -> str:
    return f"cmpl-{job_id}"


def legacy_logprobs(tokens: Sequence[TokenLogprob], *, top: int, offset: int = 0) -> dict[str, Any]:
    """A text completion's ``logprobs``: parallel lists of the tokens, their log
    probabilities, each position's ``top`` most likely tokens plus the one chosen (as
    OpenAI defines it), and each token's character offset in the answer, counted from
    ``offset`` (the text before these tokens)."""
    texts, values, tops, offsets = [], [], [], []
    for token in tokens:
        texts.append(token.token)
        values.append(token.logprob)
        ranked = {token.token: token.logprob}
        for alternative in token.top_logprobs:
            if len(ranked) > top:
                break
            ranked.setdefault(alternative.token, alternative.logprob)
        tops.append(ranked)
        offsets.append(offset)
        offset += len(token.token)
    return {"tokens": texts, "token_logprobs": values, "top_logprobs": tops, "text_offset": offsets}


def text_completion(
    answer: JobAnswer, *, logprobs: int | None = None, tokens: Sequence[TokenLogprob] = ()
) -> dict[str, Any]:
    """A ``text_completion`` object: one choice of the answer's ``text`` (whose tokens
    are ``tokens``), or with its ``choices`` (a request for several) one each; with
    ``logprobs`` (the request's), each choice's in the legacy shape."""
    choices = answer.choices
    if choices is None:
        choices = [
            ChoiceOutput(
                index=0, text=answer.text, finish_reason=answer.finish_reason, logprobs=list(tokens)
            )
        ]
    answers = [
        {
            "index": choice.index,
            "text": choice.text,
            "logprobs": None
            if logprobs is None
            else legacy_logprobs(choice.logprobs or [], top=logprobs),
            "finish_reason": choice.finish_reason or "stop",
        }
        for choice in choices
    ]
    return whole_answer("text_completion", completion_id(answer.job_id), answer, answers)


def text_chunk(
    *,
    job_id: str,
    model: str,
    text: str = "",
    finish_reason: str | None = None,
    logprobs: dict[str, Any] | None = None,
    usage: Usage | None = None,
    index: int = 0,
) -> dict[str, Any]:
    """One streamed ``text_completion`` chunk (of choice ``index``); with ``usage``, the
    usage chunk (no choices)."""
    choice = {"index": index, "text": text, "logprobs": logprobs, "finish_reason": finish_reason}
    return stream_chunk("text_completion", completion_id(job_id), model, choice, usage)
