from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from producer.router.artifact import (
    RouterArtifact,
    current_artifact_path,
    load_artifact,
    save_artifact,
)
from producer.router.classifier import DifficultyClassifier, Prediction
from producer.router.embedding import MAX_TOKENS, StaticEmbedder
from producer.router.policy import PolicyConfig, apply_policy
from producer.router.softmax_head import evaluate
from schemas.errors import ConfigError
from schemas.queues import Tier


def prediction(small: float, medium: float, large: float) -> Prediction:
    probs = {"small": small, "medium": medium, "large": large}
    best = max(probs, key=probs.__getitem__)
    return Prediction(Tier(best), probs[best], probs)


def test_a_confident_prediction_is_kept() -> None:
    decision = apply_policy(prediction(0.9, 0.08, 0.02), PolicyConfig())
    assert (decision.tier, decision.escalated) == (Tier.SMALL, False)
    assert decision.reason == "classified small (0.90)"


def test_a_fair_chance_of_large_goes_large() -> None:
    decision = apply_policy(prediction(0.55, 0.05, 0.4), PolicyConfig(large_threshold=0.35))
    assert decision.tier is Tier.LARGE
    assert "err upward" in decision.reason


def test_low_confidence_escalates_one_tier() -> None:
    decision = apply_policy(prediction(0.45, 0.3, 0.25), PolicyConfig(min_confidence=0.5))
    assert (decision.tier, decision.escalated) == (Tier.MEDIUM, True)
    assert "low confidence 0.45" in decision.reason


def test_evaluation_counts_precision_recall_and_confusion() -> None:
    true = [Tier.SMALL, Tier.SMALL, Tier.LARGE, Tier.MEDIUM]
    routed = [Tier.SMALL, Tier.MEDIUM, Tier.LARGE, Tier.LARGE]
    result = evaluate(true, routed)
    assert result.accuracy == 0.5
    assert result.recall == {"small": 0.5, "medium": 0.0, "large": 1.0}
    assert result.precision["large"] == 0.5
    assert result.confusion == [[1, 1, 0], [0, 0, 1], [0, 0, 1]]


def word_tokenizer() -> Tokenizer:
    vocab = {"[UNK]": 0, "order": 1, "status": 2, "prove": 3, "theorem": 4}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    return tokenizer


def tiny_artifact() -> RouterArtifact:
    vectors = np.eye(5, 3, dtype=np.float32)
    return RouterArtifact(
        tokenizer_json=word_tokenizer().to_str(),
        vectors=vectors,
        mean=np.zeros(3, dtype=np.float32),
        scale=np.ones(3, dtype=np.float32),
        weights=np.eye(3, dtype=np.float32) * 5,
        bias=np.zeros(3, dtype=np.float32),
        metadata={"data_hash": "x"},
    )


def test_artifacts_round_trip_and_are_named_by_content(tmp_path: Path) -> None:
    artifact = tiny_artifact()
    path = save_artifact(artifact, tmp_path)
    assert path.name == f"router-{artifact.content_hash}.npz"
    assert current_artifact_path(tmp_path) == path
    loaded = load_artifact(path)
    assert loaded.metadata == {"data_hash": "x"}
    assert loaded.content_hash == artifact.content_hash
    classifier = DifficultyClassifier(loaded)
    assert classifier.predict("order order").tier is Tier.MEDIUM  # id 1 -> axis 1


def test_a_damaged_artifact_is_a_config_error(tmp_path: Path) -> None:
    broken = tmp_path / "router-x.npz"
    broken.write_bytes(b"not numpy")
    with pytest.raises(ConfigError, match="cannot load router artifact"):
        load_artifact(broken)


def test_very_long_text_is_truncated_not_refused() -> None:
    embedder = StaticEmbedder(
        word_tokenizer(), np.eye(5, 3, dtype=np.float32), np.ones(5, np.float32)
    )
    long_text = "order " * MAX_TOKENS + "theorem " * 1000
    vector = embedder.embed(long_text)
    # Only the first MAX_TOKENS tokens count: all "order".
    assert np.allclose(vector, embedder.embed("order"))
    assert np.allclose(embedder.embed(""), 0)
