"""``POST /v1/completions`` with the real engine, through the gateway, with the official
SDK: the prompt is continued as it is (no chat template), streamed and not, with stop
strings and legacy logprobs. Greedy decoding (temperature 0) makes each comparison exact."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import openai
import pytest
from tokenizers import Tokenizer

from producer.limits import tokenizer_file
from schemas.queues import Tier
from schemas.settings import Settings
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import new_key

pytestmark = pytest.mark.e2e

PROMPT = "One, two, three, four, five,"


@pytest.fixture(scope="module")
def sdk(e2e_settings: Settings, worker: str) -> Iterator[openai.OpenAI]:
    with running_gateway(e2e_settings) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key=new_key(e2e_settings, "completions"))


def complete(sdk: openai.OpenAI, **fields: Any) -> Any:
    fields = {"prompt": PROMPT, "max_tokens": 12, "temperature": 0, **fields}
    return sdk.completions.create(model="small", **fields)


def test_a_prompt_is_continued_as_it_is_streamed_or_not(
    sdk: openai.OpenAI, e2e_settings: Settings
) -> None:
    reply = complete(sdk)
    assert reply.object == "text_completion"
    [choice] = reply.choices
    assert choice.text.strip() and choice.finish_reason == "length"
    # The prompt's own tokens: no chat template around them.
    folder = tokenizer_file(e2e_settings, Tier.SMALL)
    assert folder is not None
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    assert reply.usage is not None
    assert reply.usage.prompt_tokens == len(tokenizer.encode(PROMPT).ids)
    assert reply.usage.completion_tokens == 12
    # A counting prompt goes on counting.
    assert "six" in choice.text.lower(), choice.text

    text, finish = "", None
    for chunk in complete(sdk, stream=True):
        assert chunk.object == "text_completion"
        for part in chunk.choices:
            text += part.text
            finish = part.finish_reason or finish
    assert (text, finish) == (choice.text, "length")


def test_a_stop_string_ends_the_text_before_it(sdk: openai.OpenAI) -> None:
    free = complete(sdk).choices[0].text
    words = free.split()
    assert len(words) >= 3, free
    stop = words[1]
    reply = complete(sdk, stop=[stop])
    assert (reply.choices[0].text, reply.choices[0].finish_reason) == (
        free[: free.index(stop)],
        "stop",
    )


def test_logprobs_come_in_the_legacy_shape(sdk: openai.OpenAI) -> None:
    reply = complete(sdk, logprobs=2, max_tokens=6)
    [choice] = reply.choices
    logprobs = choice.logprobs
    assert logprobs is not None and logprobs.tokens is not None
    assert "".join(logprobs.tokens) == choice.text
    assert logprobs.token_logprobs is not None and len(logprobs.token_logprobs) == 6
    assert logprobs.top_logprobs is not None
    for token, value, top in zip(
        logprobs.tokens, logprobs.token_logprobs, logprobs.top_logprobs, strict=True
    ):
        assert value <= 0
        # Greedy: the token taken is the likeliest of the (up to 3) listed.
        assert token in top and top[token] == pytest.approx(max(top.values()))
        assert 1 <= len(top) <= 3
    offsets = logprobs.text_offset
    assert offsets is not None and offsets[0] == 0
    assert offsets == [sum(len(t) for t in logprobs.tokens[:i]) for i in range(6)]


def test_what_completions_do_not_serve_is_refused_before_it_queues(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.BadRequestError, match="echo"):
        complete(sdk, echo=True)
    with pytest.raises(openai.BadRequestError, match="suffix"):
        complete(sdk, suffix=" and so on")
