"""Where a system prompt spends tokens for nothing, each finding with its token cost.

One analysis serves both commands: ``lint`` reports it, ``compress`` applies it. A
finding's ``tokens`` is what compress would remove for it (for a contradiction, the
tokens of the instructions that disagree: compress keeps both, a person must choose).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from producer.prompts.embed import Embedder, Vectors
from producer.prompts.parse import Document, Example, Section, Sentence, parse

TokenCounter = Callable[[str], int]

DUPLICATE_THRESHOLD = 0.75
CONTRADICTION_THRESHOLD = 0.55
KEEP_EXAMPLES = 3
# Format instructions longer than this are "verbose": one example shows a format better.
FORMAT_BUDGET_TOKENS = 80
FORMAT_KEEP_RULES = 2
FORMAT_HINT = "Write every reply in the format of the examples below."

# Sentences that tell the model nothing it does not already do.
_BOILERPLATE = [
    re.compile(p, re.IGNORECASE)
    for p in (
        r"^you are an? (helpful|friendly|useful|ai|honest)\b[^.]*\bassistant\.?$",
        r"^remember,? you are an? (helpful|friendly|ai)\b",
        r"^(it is|it's) (very |extremely |really )?important that you follow\b",
        r"\bfollow (all|each|every) (of )?(these|the|this|nine|the following)\b.*"
        r"\b(instructions|rules|format)\b",
        r"^thank you for (following|reading)\b",
        r"^please do your best\b",
        r"^(please )?read (these|the following|the) (instructions|rules) carefully",
        r"^here are (some )?(examples|a few examples)\b",
        r"^study (them|these|the examples) carefully\b",
        r"^(please )?format every reply in the following way\.?$",
    )
]
# Phrases inside a sentence that add length, not meaning: (pattern, replacement).
FILLERS: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(p, re.IGNORECASE), r)
    for p, r in (
        (r"^please make sure (that )?(you )?(to )?", ""),
        (r"^make sure (that )?(you )?(to )?", ""),
        (r"^it is (very |extremely |really )?important that you ", ""),
        (r"^remember that ", ""),
        (r"^please,? ", ""),
        (
            r",? (at all times|every single time|without exception|with no exceptions"
            r"|under any circumstances)\b",
            "",
        ),
        (r"\bnever, ever\b", "never"),
        (r"\bin order to\b", "to"),
    )
)
_FORMAT_HEADER = re.compile(r"\b(format|formatting|layout|structure)\b", re.IGNORECASE)
_FORMAT_WORDS = re.compile(
    r"\b(markdown|heading|headings|bold|bullet|bullets|numbered list|paragraphs?|greeting"
    r"|signature|sign off|blank line|tables?)\b",
    re.IGNORECASE,
)
_NEGATIVE = re.compile(r"\b(never|do not|don't|must not|mustn't|avoid|no longer)\b", re.I)
_POSITIVE = re.compile(r"\b(always|must)\b", re.IGNORECASE)
_CONDITION = re.compile(r"^(if|when|unless|once|while)\b[^,;]*[,;]\s*", re.IGNORECASE)
_NUMBER = re.compile(r"\d+(?:[.,]\d+)?")
_WORD = re.compile(r"[a-z]+")
_STOP = frozenset(
    re.findall(
        r"\S+",
        "always never must not do don't avoid the a an and or of to in on for with your "
        "you they their them this that these those is are be been it its so as at by "
        "from if when then every each any all use make sure please",
    )
)


@dataclass(frozen=True)
class Finding:
    """One problem: its kind, what it costs in tokens, where, and the text involved."""

    kind: str  # duplicate | contradiction | examples | format | boilerplate
    tokens: int
    lines: tuple[int, ...]
    summary: str
    texts: tuple[str, ...] = ()


@dataclass
class Analysis:
    """The findings, and the edits compress makes from them."""

    total_tokens: int
    findings: list[Finding]
    drop_sentences: set[int] = field(default_factory=set)  # id() of Sentence objects
    rewrites: dict[int, str] = field(default_factory=dict)  # id(Sentence) -> shorter text
    drop_examples: set[int] = field(default_factory=set)  # id() of Example objects
    format_section: Section | None = None

    @property
    def removable_tokens(self) -> int:
        return sum(f.tokens for f in self.findings if f.kind != "contradiction")

    def to_dict(self) -> dict[str, Any]:
        return {
            "total_tokens": self.total_tokens,
            "removable_tokens": self.removable_tokens,
            "findings": [asdict(f) for f in self.findings],
        }


@dataclass(frozen=True)
class LintOptions:
    duplicate_threshold: float = DUPLICATE_THRESHOLD
    contradiction_threshold: float = CONTRADICTION_THRESHOLD
    keep_examples: int = KEEP_EXAMPLES
    format_budget_tokens: int = FORMAT_BUDGET_TOKENS


def analyse(
    text: str,
    *,
    count: TokenCounter,
    embed: Embedder,
    options: LintOptions | None = None,
    document: Document | None = None,
) -> tuple[Document, Analysis]:
    """Parse ``text`` (unless ``document`` is given) and find what costs tokens for nothing."""
    options = options or LintOptions()
    document = document or parse(text)
    analysis = Analysis(total_tokens=count(text), findings=[])
    sentences = document.sentences()
    _boilerplate(sentences, analysis, count)
    rest = [s for s in sentences if id(s) not in analysis.drop_sentences]
    vectors = embed([s.text for s in rest])
    _duplicates_and_contradictions(rest, vectors, analysis, count, options)
    _examples(document.examples(), analysis, count, embed, options.keep_examples)
    _format(document, analysis, count, options)
    _fillers([s for s in sentences if id(s) not in analysis.drop_sentences], analysis, count)
    analysis.findings.sort(key=lambda f: (f.kind == "contradiction", -f.tokens))
    return document, analysis


def _boilerplate(sentences: list[Sentence], analysis: Analysis, count: TokenCounter) -> None:
    found = [s for s in sentences if any(p.search(s.text) for p in _BOILERPLATE)]
    if not found:
        return
    analysis.drop_sentences.update(id(s) for s in found)
    analysis.findings.append(
        Finding(
            "boilerplate",
            sum(count(s.text) for s in found),
            tuple(s.line for s in found),
            f"{len(found)} sentences that tell the model nothing",
            tuple(s.text for s in found),
        )
    )


def _fillers(sentences: list[Sentence], analysis: Analysis, count: TokenCounter) -> None:
    saved = 0
    lines: list[int] = []
    for sentence in sentences:
        shorter = strip_fillers(sentence.text)
        if shorter != sentence.text:
            analysis.rewrites[id(sentence)] = shorter
            saved += count(sentence.text) - count(shorter)
            lines.append(sentence.line)
    if saved > 0:
        analysis.findings.append(
            Finding(
                "boilerplate",
                saved,
                tuple(lines),
                f"filler phrases in {len(lines)} instructions ('please make sure', 'at all times')",
            )
        )


def strip_fillers(text: str) -> str:
    """``text`` without filler phrases, its first letter capitalised again."""
    shorter = text
    for pattern, replacement in FILLERS:
        shorter = pattern.sub(replacement, shorter)
    shorter = re.sub(r"\s{2,}", " ", shorter).strip()
    return shorter[:1].upper() + shorter[1:] if shorter else text


def _duplicates_and_contradictions(
    sentences: list[Sentence],
    vectors: Vectors,
    analysis: Analysis,
    count: TokenCounter,
    options: LintOptions,
) -> None:
    similarity = vectors @ vectors.T if len(sentences) else np.zeros((0, 0))
    parent = list(range(len(sentences)))

    def root(i: int) -> int:
        while parent[i] != i:
            parent[i] = parent[parent[i]]
            i = parent[i]
        return i

    contradictions: list[tuple[int, int, str]] = []
    for i in range(len(sentences)):
        for j in range(i + 1, len(sentences)):
            a, b = sentences[i].text, sentences[j].text
            score = float(similarity[i, j])
            opposite = _opposite(a, b)
            if opposite and score >= options.contradiction_threshold and _shared_stems(a, b):
                contradictions.append((i, j, "always/never on the same subject"))
            elif score >= options.duplicate_threshold and not opposite:
                if not (_numbers(a) <= _numbers(b) or _numbers(b) <= _numbers(a)):
                    contradictions.append((i, j, "the same rule with different numbers"))
                else:
                    parent[root(j)] = root(i)
    for i, j, why in contradictions:
        pair = (sentences[i], sentences[j])
        analysis.findings.append(
            Finding(
                "contradiction",
                sum(count(s.text) for s in pair),
                tuple(s.line for s in pair),
                why,
                tuple(s.text for s in pair),
            )
        )
    clusters: dict[int, list[int]] = {}
    for i in range(len(sentences)):
        clusters.setdefault(root(i), []).append(i)
    for members in clusters.values():
        if len(members) < 2:
            continue
        group = [sentences[i] for i in members]
        # Keep the fullest wording, where the first occurrence stood.
        texts = tuple(s.text for s in sorted(group, key=lambda s: s.line))
        keeper = max(group, key=lambda s: (len(s.text), -s.line))
        first = min(group, key=lambda s: s.line)
        if keeper is not first:
            first.text, keeper.text = keeper.text, first.text
            keeper = first
        dropped = [s for s in group if s is not keeper]
        analysis.drop_sentences.update(id(s) for s in dropped)
        analysis.findings.append(
            Finding(
                "duplicate",
                sum(count(s.text) for s in dropped),
                tuple(sorted(s.line for s in group)),
                f"said {len(group)} times",
                texts,
            )
        )


def _opposite(a: str, b: str) -> bool:
    return {_polarity(a), _polarity(b)} == {1, -1}


def _polarity(text: str) -> int:
    # "If you do not know, say so" commands nothing negative: read the main clause only.
    text = _CONDITION.sub("", text)
    negative = bool(_NEGATIVE.search(text))
    positive = bool(_POSITIVE.search(text))
    if positive and not negative:
        return 1
    if negative and not positive:
        return -1
    return 0


def _stems(text: str) -> set[str]:
    return {
        re.sub(r"(ies|es|s|ing|ed)$", "", word)
        for word in _WORD.findall(text.lower())
        if len(word) > 3 and word not in _STOP
    }


def _shared_stems(a: str, b: str) -> bool:
    return bool(_stems(a) & _stems(b))


def _numbers(text: str) -> frozenset[str]:
    return frozenset(_NUMBER.findall(text))


def select_diverse(vectors: Vectors, keep: int) -> list[int]:
    """Indices of ``keep`` rows: the most central first, then each farthest from those."""
    if keep <= 0 or len(vectors) == 0:
        return []
    centroid = vectors.mean(axis=0)
    chosen = [int(np.argmax(vectors @ centroid))]
    while len(chosen) < min(keep, len(vectors)):
        closest = (vectors @ vectors[chosen].T).max(axis=1)
        closest[chosen] = np.inf
        chosen.append(int(np.argmin(closest)))
    return sorted(chosen)


def _examples(
    examples: list[Example],
    analysis: Analysis,
    count: TokenCounter,
    embed: Embedder,
    keep: int,
) -> None:
    if not examples:
        return
    sizes = [count(e.text) for e in examples]
    kept = set(select_diverse(embed([e.text for e in examples]), keep))
    dropped = [i for i in range(len(examples)) if i not in kept]
    analysis.drop_examples.update(id(examples[i]) for i in dropped)
    summary = (
        f"{len(examples)} few-shot examples, {sum(sizes)} tokens "
        f"(mean {sum(sizes) // len(examples)}); keeping the {len(kept)} most diverse"
    )
    analysis.findings.append(
        Finding(
            "examples",
            sum(sizes[i] for i in dropped),
            tuple(examples[i].line for i in dropped),
            summary,
        )
    )


def format_section(document: Document) -> Section | None:
    """The section whose header names the reply's format, if there is one."""
    for section in document.sections:
        if section.header and _FORMAT_HEADER.search(section.header) and section.sentences():
            return section
    return None


def _format(
    document: Document, analysis: Analysis, count: TokenCounter, options: LintOptions
) -> None:
    section = format_section(document)
    if section is None:
        return
    live = [s for s in section.sentences() if id(s) not in analysis.drop_sentences]
    spent = sum(count(s.text) for s in live)
    if spent <= options.format_budget_tokens:
        return
    rules = sorted(
        (s for s in live if _NEGATIVE.search(s.text) and _FORMAT_WORDS.search(s.text)),
        key=lambda s: count(s.text),
    )[:FORMAT_KEEP_RULES]
    dropped = [s for s in live if s not in rules]
    analysis.drop_sentences.update(id(s) for s in dropped)
    analysis.format_section = section
    saved = sum(count(s.text) for s in dropped) - count(FORMAT_HINT)
    analysis.findings.append(
        Finding(
            "format",
            max(saved, 0),
            (section.line,),
            f"{len(live)} format instructions, {spent} tokens; one example shows a format",
            (section.header or "",),
        )
    )
