"""The difficulty classifier: text in, tier probabilities out, within the 5 ms budget.

No torch: a table lookup, a mean and a small softmax head (``llmq bench classifier``
measures the latency per decision against the budget).
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass

import numpy as np
from tokenizers import Tokenizer

from producer.router.artifact import RouterArtifact
from producer.router.embedding import StaticEmbedder
from producer.router.outcomes import OUTCOME_HEAD_KEY, OutcomeHead
from producer.router.softmax_head import TIERS, Matrix, softmax
from schemas.queues import Tier


@dataclass(frozen=True)
class Prediction:
    tier: Tier
    confidence: float
    probabilities: dict[str, float]
    familiarity: float = 1.0
    """Share of the text's words the router knows; low for gibberish or other languages."""
    large_gain: float | None = None
    """The chance that large answers better than small, by the artifact's outcome head
    (``llmq router tune`` writes one from measured answers); None without one."""


WORD = re.compile(r"[^\W\d_]+")
CODE_MARK = re.compile(r"[{}();=<>\[\]_/\\*+^]")
SHAPE = "shape"
"""The feature set name, in an artifact's ``features``, of :func:`shape_features`."""


def shape_features(text: str) -> list[float]:
    """What a mean of token vectors loses: how long the text is, how much of it is code
    or formula marks, how many digits it holds, how many questions it asks."""
    return [
        math.log1p(len(text.split())),
        10 * len(CODE_MARK.findall(text)) / max(len(text), 1),
        math.log1p(sum(c.isdigit() for c in text)),
        float(text.count("?")),
    ]


def feature_matrix(embedder: StaticEmbedder, texts: list[str], features: list[str]) -> Matrix:
    """The static embeddings of ``texts``, then the named extra features."""
    embedded = embedder.embed_many(texts)
    if SHAPE not in features:
        return embedded
    extra = np.array([shape_features(t) for t in texts], dtype=np.float32)
    stacked: Matrix = np.hstack([embedded, extra]).astype(np.float32)
    return stacked


class DifficultyClassifier:
    """Embeds with the artifact's static table and applies its softmax head."""

    def __init__(self, artifact: RouterArtifact) -> None:
        ones = np.ones(artifact.vectors.shape[0], dtype=np.float32)
        tokenizer = Tokenizer.from_str(artifact.tokenizer_json)
        self._embedder = StaticEmbedder(tokenizer, artifact.vectors, ones)
        # Whole words of the encoder's vocabulary, plus the training data's own words
        # ("pls", "thx"): text made mostly of other words is outside what was learned.
        self._known_words = set(tokenizer.get_vocab()) | set(
            artifact.metadata.get("known_words", [])
        )
        self._mean = artifact.mean
        self._scale = artifact.scale
        self._weights = artifact.weights
        self._bias = artifact.bias
        self._artifact = artifact
        self.metadata = artifact.metadata
        self._features = [str(f) for f in artifact.metadata.get("features", [])]
        head = artifact.metadata.get(OUTCOME_HEAD_KEY)
        self.outcome_head = OutcomeHead.from_json(head) if isinstance(head, dict) else None

    @property
    def model_hash(self) -> str:
        """The artifact's ``model_hash`` (what a measured frontier was scored with)."""
        return self._artifact.model_hash

    def features(self, texts: list[str]) -> Matrix:
        """What the head reads of each text, one row per text, before the head's own
        standardisation: the static embedding, then the artifact's extra features."""
        return feature_matrix(self._embedder, texts, self._features)

    def probabilities(self, texts: list[str]) -> Matrix:
        return self._head(self.features(texts))

    def _head(self, raw: Matrix) -> Matrix:
        features = (raw - self._mean) / self._scale
        return softmax(features.astype(np.float32) @ self._weights + self._bias)

    def predict(self, text: str) -> Prediction:
        """The most likely tier and its probability (before any policy), and the outcome
        head's score where the artifact has one."""
        raw = self.features([text])
        probs = self._head(raw)[0]
        best = int(probs.argmax())
        gain = None
        if self.outcome_head is not None:
            gain = float(self.outcome_head.score(raw.astype(np.float64))[0])
        return Prediction(
            tier=TIERS[best],
            confidence=float(probs[best]),
            probabilities={tier.value: float(p) for tier, p in zip(TIERS, probs, strict=True)},
            familiarity=self.familiarity(text),
            large_gain=gain,
        )

    def familiarity(self, text: str) -> float:
        """Share of the text's words that are known; 0 for text with no words at all."""
        words = WORD.findall(text.lower())
        if not words:
            return 0.0
        return sum(word in self._known_words for word in words) / len(words)


def training_words(texts: list[str], vocabulary: set[str]) -> list[str]:
    """Words of the training texts the encoder's vocabulary lacks (sorted, for hashing)."""
    return sorted({w for t in texts for w in WORD.findall(t.lower())} - vocabulary)
