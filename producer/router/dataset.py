"""The labelled routing requests kept in the repository, with their fixed split."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from schemas.queues import Tier

DATA_PATH = Path(__file__).resolve().parent / "data" / "requests.jsonl"
HELDOUT_PATH = Path(__file__).resolve().parent / "data" / "heldout.jsonl"
"""Requests written apart from the training data (not paraphrases of it), never trained on."""
SPLITS = ("train", "validation", "heldout")


@dataclass(frozen=True)
class Example:
    text: str
    tier: Tier
    split: str


def load_examples(path: Path = DATA_PATH) -> list[Example]:
    """Every example, in file order; raises ``ValueError`` naming a malformed line."""
    examples = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
            example = Example(str(row["text"]), Tier(row["tier"]), str(row["split"]))
        except (ValueError, KeyError) as exc:
            raise ValueError(f"{path.name}:{number}: {exc}") from exc
        if example.split not in SPLITS:
            raise ValueError(f"{path.name}:{number}: unknown split {example.split!r}")
        examples.append(example)
    return examples


def load_heldout(path: Path = HELDOUT_PATH) -> list[Example]:
    """The held-out requests; raises ``ValueError`` naming a malformed line or a row of
    another split (the file is kept apart from training by its split as well)."""
    examples = load_examples(path)
    for number, example in enumerate(examples, start=1):
        if example.split != "heldout":
            raise ValueError(f"{path.name}: row {number} has split {example.split!r}")
    return examples


def data_hash(examples: list[Example]) -> str:
    """Identifies the training data an artifact was built from."""
    digest = hashlib.sha256()
    for example in examples:
        digest.update(f"{example.split}\t{example.tier.value}\t{example.text}\n".encode())
    return digest.hexdigest()[:16]
