"""Features beside the static embedding: the text's shape."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from producer.router.classifier import SHAPE, DifficultyClassifier, shape_features
from schemas.queues import Tier
from tests.unit.test_router_policy import tiny_artifact


def test_shape_features_see_length_code_digits_and_questions() -> None:
    short = shape_features("order status")
    code = shape_features("fix this: def f(x): return x[0] * 2 + 1 ? why?")
    assert short[0] == pytest.approx(np.log1p(2))
    assert short[1:] == [0.0, 0.0, 0.0]
    assert code[0] > short[0] and code[1] > 0 and code[2] > 0 and code[3] == 2.0


def test_an_artifact_naming_the_shape_features_uses_them() -> None:
    base = tiny_artifact()
    weights = np.zeros((7, 3), dtype=np.float32)
    weights[6, 2] = 5.0  # questions (the last shape feature): large
    shaped = replace(
        base,
        mean=np.zeros(7, dtype=np.float32),
        scale=np.ones(7, dtype=np.float32),
        weights=weights,
        metadata={"features": [SHAPE]},
    )
    classifier = DifficultyClassifier(shaped)
    assert classifier.predict("order? status? why?").tier is Tier.LARGE
    assert classifier.predict("order status").probabilities["large"] == pytest.approx(1 / 3)
    # Without the name, an artifact is the embedding alone (older artifacts load as before).
    assert DifficultyClassifier(base).predict("order").tier is Tier.MEDIUM
