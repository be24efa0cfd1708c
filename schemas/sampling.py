"""Sampling options beyond the basics: penalties, vLLM's sampling extras, and a
constraint on the answer's form (structured output).

They travel as one object, a request's ``sampling``, which a request that uses none
of them leaves out: such a request, its stored row and its queue message are exactly
what they were before these options existed (an older worker still runs it, and an
idempotent replay hashes the same).
"""

from __future__ import annotations

import json
import re
from typing import Any, Literal

import jsonschema
from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from schemas.text import valid_unicode

MAX_CHOICES = 64
"""Most options a ``choice`` constraint may list."""
MAX_PATTERN_CHARS = 4096
"""Longest ``regex`` constraint."""
MAX_LOGIT_BIAS = 1024
"""Most tokens one request may bias."""
MAX_TOP_LOGPROBS = 20
"""Most alternatives per token (OpenAI's bound, and the engine's default)."""


class StructuredOutput(BaseModel):
    """What form the answer must take; the engine constrains its tokens to it.

    ``json_object``: any JSON object. ``json_schema``: JSON valid against ``json_schema``.
    ``choice``: exactly one of ``choice``. ``regex``: a match of ``regex``.
    """

    model_config = ConfigDict(extra="forbid", frozen=True)

    kind: Literal["json_object", "json_schema", "choice", "regex"]
    json_schema: dict[str, Any] | None = None
    choice: list[str] | None = Field(default=None, min_length=1, max_length=MAX_CHOICES)
    regex: str | None = Field(default=None, min_length=1, max_length=MAX_PATTERN_CHARS)

    @model_validator(mode="after")
    def _one_constraint(self) -> StructuredOutput:
        given = {
            name
            for name, value in (
                ("json_schema", self.json_schema),
                ("choice", self.choice),
                ("regex", self.regex),
            )
            if value is not None
        }
        needed = {self.kind} - {"json_object"}
        if given != needed:
            wanted = f"only {self.kind}" if needed else "none of json_schema, choice, regex"
            raise ValueError(f"a {self.kind} constraint takes {wanted}; got {sorted(given)}")
        for text in [*(self.choice or []), self.regex or ""]:
            valid_unicode(text)
        if self.json_schema is not None:
            # Keys too: a lone surrogate anywhere could not be stored with the job.
            valid_unicode(json.dumps(self.json_schema, ensure_ascii=False))
            _check_schema(self.json_schema)
        if self.regex is not None:
            _check_regex(self.regex)
        return self


# Error texts quote the caller's own schema or pattern; long ones are cut.
_MAX_PROBLEM_CHARS = 200


def _check_schema(schema: dict[str, Any]) -> None:
    """Raise ``ValueError`` for a schema that is not a JSON schema (of the draft it names,
    else 2020-12): the engine could not compile it, and the job would fail in the worker
    instead of being refused here."""
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(part) for part in exc.path) or "its root"
        raise ValueError(
            f"json_schema is not a valid JSON schema at {where}: {exc.message[:_MAX_PROBLEM_CHARS]}"
        ) from None


def _check_regex(pattern: str) -> None:
    """Raise ``ValueError`` for a pattern that does not compile."""
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"regex does not compile: {str(exc)[:_MAX_PROBLEM_CHARS]}") from None


class Sampling(BaseModel):
    """Sampling knobs past temperature, top_p, stop and seed (which a request carries
    itself). Defaults change nothing; bounds are the engine's (vLLM's ``SamplingParams``).
    """

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)

    presence_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    frequency_penalty: float = Field(default=0.0, ge=-2.0, le=2.0)
    repetition_penalty: float = Field(
        default=1.0, gt=0.0, description="above 1 discourages tokens already in the text"
    )
    top_k: int = Field(
        default=0, ge=-1, le=2**31 - 1, description="0 (or -1) considers every token"
    )
    min_p: float = Field(default=0.0, ge=0.0, le=1.0)
    min_tokens: int = Field(
        default=0, ge=0, description="the end of text and stop strings are held off this long"
    )
    structured: StructuredOutput | None = None
    logit_bias: dict[int, float] | None = Field(
        default=None,
        max_length=MAX_LOGIT_BIAS,
        description="added to the named token ids' logits before sampling",
    )
    logprobs: int | None = Field(
        default=None,
        ge=0,
        le=MAX_TOP_LOGPROBS,
        description="each generated token's log probability, with this many alternatives",
    )

    @field_validator("logit_bias")
    @classmethod
    def _bias_in_range(cls, value: dict[int, float] | None) -> dict[int, float] | None:
        if not value:
            return None  # no bias is no option
        for token, bias in value.items():
            if token < 0:
                raise ValueError(f"logit_bias: {token} is not a token id")
            if not -100.0 <= bias <= 100.0:
                raise ValueError(f"logit_bias of token {token} is {bias}, not within [-100, 100]")
        return value

    def is_default(self) -> bool:
        """True when these options change nothing."""
        return self == Sampling()
