"""Quality cases: a prompt, the rule that scores an answer, and what the rule expects.

A case file is JSON Lines, one case per line::

    {"id": "arith-001", "prompt": "What is 7 + 5? Answer with the number only.",
     "rule": "exact", "expected": "12"}
    {"id": "cs-003", "messages": [{"role": "user", "content": "..."}],
     "rule": "similarity", "expected": "Your order ships in 2 days.", "threshold": 0.6}

* ``id``: unique in the file.
* ``prompt`` (one user message) or ``messages`` (OpenAI chat messages), not both.
* ``rule``: ``exact`` (the answer equals ``expected`` after trimming, case and a final
  full stop ignored), ``contains`` (``expected`` appears, case-insensitive; a list means
  every item must appear), ``regex`` (``expected`` is a Python pattern searched in the
  answer, case-insensitive), ``choice`` (``expected`` is the right option's letter or
  text; the first option letter A-E the answer names, or the option text, must match),
  ``json_schema`` (the first JSON object in the answer validates against ``expected``,
  a JSON Schema), ``similarity`` (embedding cosine similarity of answer and
  ``expected``, a reference answer, with all-MiniLM-L6-v2).
* ``threshold``: for ``similarity``, the cosine an answer must reach to count as right
  (default 0.6); without a pass mark (``null``) the score is the similarity itself.
* ``max_tokens`` (optional): the answer budget for this case.
* ``tags`` (optional): free labels (``customer-service``, ``arithmetic``...).
"""

from __future__ import annotations

import json
from enum import StrEnum
from pathlib import Path
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from schemas.errors import ConfigError, validation_problems

BUNDLED_CASES = Path(__file__).resolve().parent / "data" / "cases.jsonl"
"""The case file shipped with llmq (customer service, arithmetic, extraction...)."""

BENCH_POOL = 344
"""How many of the bundled file's first cases the benchmarks that sample it draw from.

``llmq bench quant``, ``bench routing``'s measured cases and ``bench mixed``'s trace
pick every n-th case or draw at random by the pool's length, so rows appended to the
file later (the ``policy`` group) would change which cases they measure: they keep to
the rows their figures were measured on."""

DEFAULT_SIMILARITY_THRESHOLD = 0.6


class Rule(StrEnum):
    """How a case's answer is scored."""

    EXACT = "exact"
    CONTAINS = "contains"
    REGEX = "regex"
    CHOICE = "choice"
    JSON_SCHEMA = "json_schema"
    SIMILARITY = "similarity"


class Case(BaseModel):
    """One quality case (see the module docstring for the file format)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    prompt: str | None = None
    messages: list[dict[str, str]] | None = None
    rule: Rule
    expected: Any
    threshold: float | None = DEFAULT_SIMILARITY_THRESHOLD
    max_tokens: int | None = Field(default=None, ge=1)
    tags: list[str] = Field(default_factory=list)

    @model_validator(mode="after")
    def _check(self) -> Case:
        if (self.prompt is None) == (self.messages is None):
            raise ValueError("a case needs exactly one of 'prompt' and 'messages'")
        if self.rule in (Rule.EXACT, Rule.REGEX, Rule.SIMILARITY) and not isinstance(
            self.expected, str
        ):
            raise ValueError(f"rule {self.rule.value!r} expects a string in 'expected'")
        if self.rule is Rule.CONTAINS and not (
            isinstance(self.expected, str)
            or (isinstance(self.expected, list) and all(isinstance(x, str) for x in self.expected))
        ):
            raise ValueError("rule 'contains' expects a string or a list of strings")
        if self.rule is Rule.CHOICE and not isinstance(self.expected, str):
            raise ValueError("rule 'choice' expects the right option (letter or text)")
        if self.rule is Rule.JSON_SCHEMA and not isinstance(self.expected, dict):
            raise ValueError("rule 'json_schema' expects a JSON Schema object")
        if self.rule is Rule.REGEX:
            import re

            try:
                re.compile(self.expected)
            except re.error as exc:
                raise ValueError(f"bad regular expression: {exc}") from exc
        return self

    def chat(self) -> list[dict[str, str]]:
        """The case as chat messages."""
        if self.messages is not None:
            return list(self.messages)
        return [{"role": "user", "content": self.prompt or ""}]


def parse_cases(lines: list[str], *, source: str = "<cases>") -> list[Case]:
    """Parse JSON Lines into cases. Raises ``ConfigError`` naming the line at fault."""
    cases: list[Case] = []
    seen: set[str] = set()
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            case = Case.model_validate(json.loads(line))
        except json.JSONDecodeError as exc:
            raise ConfigError(f"{source}:{number}: not JSON ({exc.msg})") from exc
        except ValidationError as exc:
            first = validation_problems(exc.errors()[:1], whole="case")
            raise ConfigError(f"{source}:{number}: {first}") from exc
        if case.id in seen:
            raise ConfigError(f"{source}:{number}: duplicate case id {case.id!r}")
        seen.add(case.id)
        cases.append(case)
    if not cases:
        raise ConfigError(f"{source}: no cases")
    return cases


def load_cases(path: Path | None = None) -> list[Case]:
    """Read a case file (the bundled one by default). Raises ``ConfigError``."""
    path = path or BUNDLED_CASES
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read the case file {path}: {exc.strerror}") from exc
    return parse_cases(text.splitlines(), source=str(path))


def load_bench_pool() -> list[Case]:
    """The bundled file's first ``BENCH_POOL`` cases. Raises ``ConfigError``."""
    return load_cases()[:BENCH_POOL]
