"""An extractive compression pass over a system prompt: nothing is paraphrased.

It applies lint's analysis (drop boilerplate and filler phrases, keep one wording of
each duplicated instruction, keep the most diverse few-shot examples, replace long
format instructions with a pointer to the examples), then, while the text is above
the target, drops the instruction most redundant with what is kept, never one that
says something no other kept sentence comes close to.
"""

from __future__ import annotations

import difflib
import re
from dataclasses import dataclass

import numpy as np

from producer.prompts.embed import Embedder
from producer.prompts.lint import (
    FORMAT_HINT,
    Analysis,
    LintOptions,
    TokenCounter,
    analyse,
)
from producer.prompts.parse import Document, Item, Paragraph, Sentence, render

# Below this similarity to every kept sentence, an instruction carries its own meaning:
# the target is missed rather than that instruction dropped.
REDUNDANCY_FLOOR = 0.45
_DIGIT = re.compile(r"\d")
_HEADER_FILLER = re.compile(r"\s*\((please )?read (this |these |them )?carefully\)", re.I)
MIN_EXAMPLES = 1


@dataclass(frozen=True)
class Compressed:
    text: str
    original_tokens: int
    tokens: int
    analysis: Analysis
    target_tokens: int | None
    pruned_for_target: int

    @property
    def ratio(self) -> float:
        return self.tokens / self.original_tokens if self.original_tokens else 1.0


def compress(
    text: str,
    *,
    count: TokenCounter,
    embed: Embedder,
    target_tokens: int | None = None,
    keep_examples: int = 3,
    options: LintOptions | None = None,
) -> Compressed:
    """A shorter version of ``text``; ``target_tokens`` None: the analysis's edits only."""
    options = options or LintOptions()
    options = LintOptions(
        duplicate_threshold=options.duplicate_threshold,
        contradiction_threshold=options.contradiction_threshold,
        keep_examples=keep_examples,
        format_budget_tokens=options.format_budget_tokens,
    )
    document, analysis = analyse(text, count=count, embed=embed, options=options)
    _apply(document, analysis)
    result = render(document)
    pruned = 0
    if target_tokens is not None:
        result, pruned = _prune_to_target(document, result, count, embed, target_tokens)
    return Compressed(
        text=result,
        original_tokens=analysis.total_tokens,
        tokens=count(result),
        analysis=analysis,
        target_tokens=target_tokens,
        pruned_for_target=pruned,
    )


def _apply(document: Document, analysis: Analysis) -> None:
    for sentence in document.sentences():
        if id(sentence) in analysis.drop_sentences:
            sentence.keep = False
        elif id(sentence) in analysis.rewrites:
            sentence.text = analysis.rewrites[id(sentence)]
    for example in document.examples():
        example.keep = id(example) not in analysis.drop_examples
    for section in document.sections:
        if section.header is not None:
            section.header = _HEADER_FILLER.sub("", section.header)
    shown = analysis.format_section
    if shown is not None:
        section = shown
        hint = Item("", [Sentence(FORMAT_HINT, section.line)])
        if any(example.keep for example in document.examples()):
            section.blocks.insert(0, Paragraph([hint]))


def _prune_to_target(
    document: Document, text: str, count: TokenCounter, embed: Embedder, target: int
) -> tuple[str, int]:
    pruned = 0
    items = _prunable_items(document)
    if items:
        vectors = embed([_item_text(item) for item in items])
        similarity = vectors @ vectors.T
        np.fill_diagonal(similarity, -1.0)
        alive = np.ones(len(items), dtype=bool)
        while count(text) > target:
            # Each item's closest kept neighbour: high means another item says it too.
            closest = np.where(alive[None, :], similarity, -1.0).max(axis=1)
            closest[~alive] = -1.0
            victim = int(np.argmax(closest))
            if closest[victim] < REDUNDANCY_FLOOR:
                break
            alive[victim] = False
            for sentence in items[victim].sentences:
                sentence.keep = False
            pruned += 1
            text = render(document)
    kept_examples = [e for e in document.examples() if e.keep]
    while count(text) > target and len(kept_examples) > MIN_EXAMPLES:
        kept_examples.pop().keep = False
        pruned += 1
        text = render(document)
    return text, pruned


def _prunable_items(document: Document) -> list[Item]:
    """Whole lines or list items (a sentence alone may lean on its neighbour) that may go.

    Not the opening paragraph (who the assistant is), not the format hint, and not one
    with a figure in it: a number is a fact nothing else states (lint merged the true
    duplicates already).
    """
    items = []
    for index, section in enumerate(document.sections):
        for position, block in enumerate(section.blocks):
            if not isinstance(block, Paragraph) or (index == 0 and position == 0):
                continue
            items += [
                item
                for item in block.items
                if any(s.keep for s in item.sentences)
                and not _DIGIT.search(_item_text(item))
                and FORMAT_HINT not in _item_text(item)
            ]
    return items


def _item_text(item: Item) -> str:
    return " ".join(s.text for s in item.sentences if s.keep)


def unified_diff(before: str, after: str, *, before_name: str, after_name: str) -> str:
    """A unified diff of two prompt versions, lines as they are."""
    return "".join(
        difflib.unified_diff(
            (before.rstrip("\n") + "\n").splitlines(keepends=True),
            (after.rstrip("\n") + "\n").splitlines(keepends=True) if after else [],
            fromfile=before_name,
            tofile=after_name,
        )
    )
