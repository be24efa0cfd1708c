"""The prompt-length check at submit runs for every tier, with or without a tokenizer here."""

from __future__ import annotations

import logging
from pathlib import Path

import pytest
from tokenizers import Tokenizer, models, pre_tokenizers

from producer.limits import (
    _system_prompt_tokens,
    _warn_estimating,
    check_fits,
    conservative_token_count,
    preload_tokenizers,
)
from schemas.errors import PromptTooLong
from schemas.prompt_registry import PromptRegistry, SystemPrompt
from schemas.queues import Tier
from schemas.requests import GenerationRequest
from schemas.settings import Settings, TierConfig

HUB_MODEL = "meta-llama/Llama-3.3-70B-Instruct"


def word_tokenizer(folder: Path) -> Path:
    """A real tokenizer.json that counts whitespace-separated words."""
    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.WordLevel({"[UNK]": 0, "word": 1}, unk_token="[UNK]"))
    tokenizer.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    path = folder / "tokenizer.json"
    tokenizer.save(str(path))
    return path


def settings_for(tmp_path: Path, **tier: object) -> Settings:
    return Settings(tiers={Tier.LARGE: TierConfig(**tier)}, model_cache_dir=tmp_path / "none")


def ask(text: str, max_tokens: int = 16) -> GenerationRequest:
    return GenerationRequest.from_text(text, max_tokens=max_tokens)


def test_a_hub_model_without_a_tokenizer_still_refuses_an_oversized_prompt(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    settings = settings_for(tmp_path, model=HUB_MODEL, max_model_len=4096)
    assert settings.model_dir(Tier.LARGE) is None  # nothing of the model on this host
    _warn_estimating.cache_clear()  # announced once per tier and process: maybe already
    with (
        caplog.at_level(logging.WARNING, logger="producer.limits"),
        pytest.raises(PromptTooLong, match="large tier's context window of 4096"),
    ):
        check_fits(ask("lorem ipsum " * 2000), tier=Tier.LARGE, settings=settings)
    # Not silent: the estimate is announced.
    assert "estimated conservatively" in caplog.text
    # An ordinary prompt passes the estimate.
    check_fits(ask("Where is my order?"), tier=Tier.LARGE, settings=settings)


@pytest.mark.parametrize(
    ("text", "estimate"),
    [
        # 10 full stops; the other 440 ASCII bytes at 3 a token.
        ("The quick brown fox jumps over the lazy dog. " * 10, 10 + 147),
        ("Order 12-B", 1 + 1 + 1 + 1 + 2),  # space, digits and dash one each; letters by 3
        ("1234567890" * 50, 500),  # a token per digit
        ("这是一个测试。" * 20, 280),  # two per CJK character (3 UTF-8 bytes)
    ],
)
def test_the_estimate_by_kind_of_text(text: str, estimate: int) -> None:
    assert conservative_token_count(ask(text)) == estimate + 5
    assert conservative_token_count(ask(text), system_text="ab") == estimate + 1 + 10


def test_the_estimate_counts_above_a_real_tokenizer() -> None:
    bundled = Settings().bundled_model_dir / "tokenizer.json"
    if not bundled.is_file():
        pytest.skip("the bundled model is not prepared on this host")
    tokenizer = Tokenizer.from_file(str(bundled))
    samples = [
        (Path(__file__).parents[2] / "schemas" / "prompts" / "support@1.txt").read_text(),
        Path(__file__).read_text(),  # code
        "1234567890" * 50,
        "这是一个测试句子，我们来看看分词器的表现。" * 20,  # noqa: RUF001
        "Order #A-99812 shipped 2024-03-14 to 4417 Elm St., Apt. 12B." * 20,
        "Invoice 2231: $1,249.99 due 03/31; call +1 (555) 010-2231.\n" * 20,
    ]
    for text in samples:
        real = len(tokenizer.encode(text, add_special_tokens=False).ids)
        assert conservative_token_count(ask(text)) - 5 >= real, text[:40]


def test_a_configured_tokenizer_file_counts_exactly(tmp_path: Path) -> None:
    path = word_tokenizer(tmp_path / "tok")
    settings = settings_for(tmp_path, model=HUB_MODEL, max_model_len=256, tokenizer=path)
    # 300 words are 300 tokens with this tokenizer (the byte estimate would say ~750).
    with pytest.raises(PromptTooLong, match="about 305 tokens"):
        check_fits(ask(" ".join(["word"] * 300), 8), tier=Tier.LARGE, settings=settings)
    # 200 words of 4 letters fit by count, though the byte estimate (~500) would refuse them.
    check_fits(ask(" ".join(["word"] * 200), 8), tier=Tier.LARGE, settings=settings)


def test_a_configured_tokenizer_folder_is_read_too(tmp_path: Path) -> None:
    word_tokenizer(tmp_path / "tok")
    settings = settings_for(
        tmp_path, model=HUB_MODEL, max_model_len=256, tokenizer=tmp_path / "tok"
    )
    check_fits(ask(" ".join(["word"] * 200), 8), tier=Tier.LARGE, settings=settings)


def test_a_system_prompt_counts_exactly_and_once_per_text(tmp_path: Path) -> None:
    path = word_tokenizer(tmp_path / "tok")
    settings = settings_for(tmp_path, model=HUB_MODEL, max_model_len=256, tokenizer=path)
    system = " ".join(["word"] * 200)  # 200 tokens
    _system_prompt_tokens.cache_clear()
    # 200 + 40 words and two messages' template tokens: 250 tokens, over 256 with 8 more.
    with pytest.raises(PromptTooLong, match="about 250 tokens"):
        check_fits(
            ask(" ".join(["word"] * 40), 8), tier=Tier.LARGE, settings=settings, system_text=system
        )
    check_fits(
        ask(" ".join(["word"] * 30), 8), tier=Tier.LARGE, settings=settings, system_text=system
    )
    # The same prompt text (a registered version) is counted once, then remembered.
    counted = _system_prompt_tokens.cache_info()
    assert (counted.misses, counted.hits) == (1, 1)
    # Another text is counted afresh: a new version of the prompt has its own count.
    with pytest.raises(PromptTooLong, match="about 251 tokens"):
        check_fits(
            ask(" ".join(["word"] * 40), 8),
            tier=Tier.LARGE,
            settings=settings,
            system_text=system + " word",
        )


def test_warming_counts_the_registered_prompts_of_each_tier(tmp_path: Path) -> None:
    path = word_tokenizer(tmp_path / "tok")
    settings = settings_for(tmp_path, model=HUB_MODEL, max_model_len=256, tokenizer=path)
    served = SystemPrompt("support", 1, " ".join(["word"] * 100), frozenset({Tier.LARGE}))
    other = SystemPrompt("other", 1, "word word", frozenset({Tier.SMALL}))
    _system_prompt_tokens.cache_clear()
    preload_tokenizers(settings, PromptRegistry([served, other]))
    assert _system_prompt_tokens.cache_info().misses == 1  # the large tier's prompt only
    check_fits(ask("word", 8), tier=Tier.LARGE, settings=settings, system_text=served.text)
    counted = _system_prompt_tokens.cache_info()
    assert (counted.misses, counted.hits) == (1, 1)  # the first request found it counted
