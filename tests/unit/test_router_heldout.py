"""The router on requests written apart from its training data.

``producer/router/data/heldout.jsonl`` is never trained on. The router is scored as it
routes (classifier and the default policy, large threshold 0.35) against the bar of
the routing issue: accuracy at least 0.90 and large recall at least 0.97.

It uses the host's current router when that was trained on the repository's data as it
is now (``scripts/setup`` trains it), else it trains one in a scratch folder (torch and
the encoder package, as ``llmq router train``; minutes on a slow host).
"""

from __future__ import annotations

import re
import shutil
from collections import Counter

import pytest

from producer.router.artifact import current_artifact_path, load_artifact
from producer.router.classifier import DifficultyClassifier
from producer.router.dataset import data_hash, load_examples, load_heldout
from producer.router.evaluation import evaluate_router
from producer.router.policy import PolicyConfig
from producer.router.softmax_head import Evaluation
from schemas.queues import Tier
from schemas.settings import Settings

# The routing issue's bar, met by the shipped data and features (0.937 and 0.982 on 174
# requests when written); not to be lowered to make a weaker router pass.
MIN_ACCURACY = 0.90
MIN_LARGE_RECALL = 0.97


def _words(text: str) -> str:
    return " ".join(re.findall(r"[a-z0-9]+", text.lower()))


def test_the_heldout_set_is_large_balanced_and_apart_from_the_training_data() -> None:
    heldout = load_heldout()
    assert len(heldout) >= 150
    counts = Counter(e.tier for e in heldout)
    assert min(counts[tier] for tier in Tier) >= 45
    training = {_words(e.text) for e in load_examples()}
    assert not [e.text for e in heldout if _words(e.text) in training]
    assert len({_words(e.text) for e in heldout}) == len(heldout)


@pytest.fixture(scope="module")
def classifier(tmp_path_factory: pytest.TempPathFactory) -> DifficultyClassifier:
    wanted = data_hash(load_examples())
    host = Settings().router_folder
    path = current_artifact_path(host)
    if path is not None:
        artifact = load_artifact(path)
        if artifact.metadata.get("data_hash") == wanted:
            return DifficultyClassifier(artifact)
    from producer.router.training import train_router

    folder = tmp_path_factory.mktemp("router")
    cached = host / "base-vectors.npy"
    if cached.is_file():
        shutil.copy(cached, folder / cached.name)
    trained, _ = train_router(Settings(router_dir=folder))
    return DifficultyClassifier(load_artifact(trained))


@pytest.fixture(scope="module")
def heldout_result(classifier: DifficultyClassifier) -> Evaluation:
    return evaluate_router(classifier, PolicyConfig(), load_heldout())


def test_the_router_meets_the_accuracy_bar_on_the_heldout_set(heldout_result: Evaluation) -> None:
    assert heldout_result.accuracy >= MIN_ACCURACY, heldout_result.as_dict()


def test_the_router_sends_the_heldout_large_requests_large(heldout_result: Evaluation) -> None:
    assert heldout_result.recall[Tier.LARGE.value] >= MIN_LARGE_RECALL, heldout_result.as_dict()
