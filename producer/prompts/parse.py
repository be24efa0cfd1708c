"""A prompt's text as sections, paragraphs, list items, sentences and examples.

The structure is what lint reports on and what compress edits: every sentence and
example keeps its line number, and :func:`render` writes a (possibly pruned) document
back out in the original layout.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

_HEADER = re.compile(r"^#{1,6}\s")
_BULLET = re.compile(r"^(?P<prefix>\s*(?:[-*•]|\d+[.)])\s+)(?P<body>.*)$")
_NUMBERED = re.compile(r"^(?P<indent>\s*)\d+(?P<mark>[.)])\s+$")
# An example starts "Example 3:" or with a speaker line such as "Customer: ...".
_EXAMPLE_START = re.compile(
    r"^(example\b[^\n:]{0,20}:?|(customer|user|client|human|q)\s*:)", re.IGNORECASE
)
# Split after . ! ? (or a closing quote) when the next sentence starts with a capital,
# a digit or a quote: keeps "8 pm Eastern Time." and "e.g. this" in one piece.
_SENTENCE_END = re.compile(r"(?<=[.!?])[\"”']?\s+(?=[\"“(]?[A-Z0-9])")
_EXAMPLE_NUMBER = re.compile(r"^(example\s+)\d+", re.IGNORECASE)
_ABBREVIATIONS = ("e.g.", "i.e.", "etc.", "vs.", "Mr.", "Ms.", "Dr.", "No.")


@dataclass
class Sentence:
    """One instruction sentence; ``keep`` is cleared by compress to drop it."""

    text: str
    line: int
    keep: bool = True


@dataclass
class Item:
    """A line of prose or a list item: its bullet (``""`` for prose) and sentences."""

    prefix: str
    sentences: list[Sentence]


@dataclass
class Paragraph:
    items: list[Item]


@dataclass
class Example:
    """A few-shot example: kept or dropped whole."""

    text: str
    line: int
    keep: bool = True


Block = Paragraph | Example


@dataclass
class Section:
    """A header (``None`` before the first one) and the blocks under it."""

    header: str | None
    line: int
    blocks: list[Block] = field(default_factory=list)

    def sentences(self) -> list[Sentence]:
        return [
            sentence
            for block in self.blocks
            if isinstance(block, Paragraph)
            for item in block.items
            for sentence in item.sentences
        ]

    def examples(self) -> list[Example]:
        return [block for block in self.blocks if isinstance(block, Example)]


@dataclass
class Document:
    sections: list[Section]

    def sentences(self) -> list[Sentence]:
        return [sentence for section in self.sections for sentence in section.sentences()]

    def examples(self) -> list[Example]:
        return [example for section in self.sections for example in section.examples()]


def parse(text: str) -> Document:
    """Split ``text`` into sections (``#`` headers), then paragraphs (blank lines)."""
    sections = [Section(header=None, line=1)]
    paragraph: list[tuple[int, str]] = []

    def flush() -> None:
        if paragraph:
            sections[-1].blocks.append(_block(paragraph))
            paragraph.clear()

    for number, line in enumerate(text.splitlines(), start=1):
        if _HEADER.match(line):
            flush()
            sections.append(Section(header=line.strip(), line=number))
        elif not line.strip():
            flush()
        else:
            paragraph.append((number, line))
    flush()
    return Document([s for s in sections if s.header is not None or s.blocks])


def _block(lines: list[tuple[int, str]]) -> Block:
    first_line, first = lines[0]
    if _EXAMPLE_START.match(first.strip()):
        return Example("\n".join(line for _, line in lines), first_line)
    items = []
    for number, line in lines:
        bullet = _BULLET.match(line)
        prefix, body = (bullet["prefix"], bullet["body"]) if bullet else ("", line.strip())
        items.append(Item(prefix, [Sentence(s, number) for s in split_sentences(body)]))
    return Paragraph(items)


def split_sentences(text: str) -> list[str]:
    """Sentences of one line of text, abbreviations kept whole."""
    pieces = [p.strip() for p in _SENTENCE_END.split(text.strip()) if p.strip()]
    merged: list[str] = []
    for piece in pieces:
        if merged and merged[-1].endswith(_ABBREVIATIONS):
            merged[-1] = f"{merged[-1]} {piece}"
        else:
            merged.append(piece)
    return merged


def render(document: Document) -> str:
    """The document's kept parts in the original layout; empty sections disappear."""
    out: list[str] = []
    number = 0
    for section in document.sections:
        blocks = []
        for block in section.blocks:
            if isinstance(block, Example) and block.keep:
                number += 1
            if text := _render_block(block, number):
                blocks.append(text)
        if not blocks:
            continue
        if section.header is not None:
            blocks.insert(0, section.header)
        out.append("\n\n".join(blocks))
    return "\n\n".join(out)


def _render_block(block: Block, example_number: int = 0) -> str:
    if isinstance(block, Example):
        if not block.keep:
            return ""
        # "Example 7:" becomes "Example 2:" once examples 2-6 are gone.
        return _EXAMPLE_NUMBER.sub(rf"\g<1>{example_number}", block.text, count=1)
    lines = []
    number = 0
    for item in block.items:
        kept = [s.text for s in item.sentences if s.keep]
        if not kept:
            continue
        prefix = item.prefix
        numbered = _NUMBERED.match(prefix)
        if numbered:  # keep a numbered list numbered 1, 2, 3 after items are dropped
            number += 1
            prefix = f"{numbered['indent']}{number}{numbered['mark']} "
        lines.append(prefix + " ".join(kept))
    return "\n".join(lines)
