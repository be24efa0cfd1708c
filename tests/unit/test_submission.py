from __future__ import annotations

from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from producer.router.route import Router
from producer.submission import prepare_submission
from schemas.errors import InvalidRequest, PromptTooLong
from schemas.prompt_registry import PromptRegistry
from schemas.queues import Tier
from schemas.settings import Settings, TierConfig


def word_tokenizer_dir(tmp_path: Path) -> Path:
    """A real tokenizer.json that counts whitespace-separated words."""
    vocab = {"[UNK]": 0, "word": 1}
    tokenizer = Tokenizer(models.WordLevel(vocab, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    tokenizer.save(str(tmp_path / "tokenizer.json"))
    return tmp_path


def settings_with(tmp_path: Path, **tier: object) -> Settings:
    return Settings(tiers={Tier.SMALL: TierConfig(**tier)}, model_cache_dir=tmp_path / "none")


def prepare(request: object, settings: Settings, **options: str) -> object:
    return prepare_submission(
        request,  # type: ignore[arg-type]
        tier=options.get("tier", "small"),
        priority=options.get("priority", "interactive"),
        idempotency_key=None,
        settings=settings,
        prompts=PromptRegistry.load(),
        router=Router(settings),
    )


def test_text_becomes_one_user_message(tmp_path: Path) -> None:
    submission = prepare("hello", settings_with(tmp_path))
    assert submission.request.messages[0].content == "hello"  # type: ignore[attr-defined]
    assert submission.decision.tier is Tier.SMALL  # type: ignore[attr-defined]
    assert submission.decision.reason == "explicit tier"  # type: ignore[attr-defined]


def test_auto_routes_to_the_default_tier_and_says_so(tmp_path: Path) -> None:
    submission = prepare("hello", settings_with(tmp_path), tier="auto")
    assert submission.decision.requested == "auto"  # type: ignore[attr-defined]
    assert submission.decision.tier is Tier.SMALL  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("request_", "options", "problem"),
    [
        ("", {}, "must not be empty"),
        ({"messages": []}, {}, "messages"),
        ("hi", {"tier": "huge"}, "tier"),
        ("hi", {"priority": "urgent"}, "priority"),
        (42, {}, "must be text, a dict or a GenerationRequest"),
    ],
)
def test_invalid_input_is_an_invalid_request(
    tmp_path: Path, request_: object, options: dict[str, str], problem: str
) -> None:
    with pytest.raises(InvalidRequest, match=problem):
        prepare(request_, settings_with(tmp_path), **options)


def test_max_tokens_beyond_the_context_is_refused(tmp_path: Path) -> None:
    settings = settings_with(tmp_path, max_model_len=512)
    with pytest.raises(PromptTooLong, match="max_tokens=600 does not fit the small tier"):
        prepare({"messages": [{"role": "user", "content": "hi"}], "max_tokens": 600}, settings)


def test_a_prompt_longer_than_the_context_is_refused(tmp_path: Path) -> None:
    settings = settings_with(tmp_path, model=str(word_tokenizer_dir(tmp_path)), max_model_len=256)
    long_text = " ".join(["word"] * 300)
    with pytest.raises(PromptTooLong, match="about 305 tokens"):
        prepare({"messages": [{"role": "user", "content": long_text}], "max_tokens": 8}, settings)
    # The same tokenizer lets a short prompt through.
    prepare({"messages": [{"role": "user", "content": "word word"}], "max_tokens": 8}, settings)
