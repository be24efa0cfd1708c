"""The real engine honours OpenAI's sampling fields and vLLM's extras sent through the
gateway with the official SDK: stop strings, JSON output, penalties, top_k, min_tokens,
seed. Greedy decoding (temperature 0) makes each comparison exact."""

from __future__ import annotations

import json
from collections.abc import Iterator
from typing import Any

import openai
import pytest
from tokenizers import Tokenizer

from producer.limits import tokenizer_file
from schemas.queues import Tier
from schemas.settings import Settings
from tests.e2e.answers import stop_in_the_middle
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import new_key

pytestmark = pytest.mark.e2e

COUNT = [{"role": "user", "content": "Count from one to twenty in words, separated by commas."}]


@pytest.fixture(scope="module")
def sdk(e2e_settings: Settings, worker: str) -> Iterator[openai.OpenAI]:
    with running_gateway(e2e_settings) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key=new_key(e2e_settings, "fields"))


def answer(sdk: openai.OpenAI, **fields: Any) -> tuple[str, str | None, int]:
    """Text, finish reason and completion tokens of one greedy answer."""
    fields = {"messages": COUNT, "max_tokens": 32, "temperature": 0, **fields}
    reply = sdk.chat.completions.create(model="small", **fields)
    assert reply.usage is not None
    choice = reply.choices[0]
    return choice.message.content or "", choice.finish_reason, reply.usage.completion_tokens


def streamed(sdk: openai.OpenAI, **fields: Any) -> tuple[str, str | None]:
    fields = {"messages": COUNT, "max_tokens": 32, "temperature": 0, **fields}
    text, finish = "", None
    for chunk in sdk.chat.completions.create(model="small", stream=True, **fields):
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    return text, finish


def test_a_stop_string_ends_the_answer_before_it_streamed_or_not(sdk: openai.OpenAI) -> None:
    free, _, _ = answer(sdk)
    stop = stop_in_the_middle(free)
    before = free[: free.index(stop)]
    assert answer(sdk, stop=stop)[:2] == (before, "stop")
    assert answer(sdk, stop=["no such text", stop])[:2] == (before, "stop")
    assert streamed(sdk, stop=[stop]) == (before, "stop")


def test_json_object_and_json_schema_answers_parse(sdk: openai.OpenAI) -> None:
    question = [{"role": "user", "content": "What is the capital of Italy? Answer in JSON."}]
    text, finish, _ = answer(
        sdk, messages=question, max_tokens=64, response_format={"type": "json_object"}
    )
    assert finish == "stop", text
    assert isinstance(json.loads(text), dict)

    schema = {
        "type": "object",
        "properties": {"capital": {"type": "string", "enum": ["Rome", "Milan", "Paris"]}},
        "required": ["capital"],
        "additionalProperties": False,
    }
    response_format = {
        "type": "json_schema",
        "json_schema": {"name": "capital", "schema": schema, "strict": True},
    }
    text, finish, _ = answer(sdk, messages=question, max_tokens=64, response_format=response_format)
    assert finish == "stop", text
    assert json.loads(text)["capital"] in {"Rome", "Milan", "Paris"}
    streamed_text, _ = streamed(
        sdk, messages=question, max_tokens=64, response_format=response_format
    )
    assert streamed_text == text


def test_a_choice_constraint_answers_one_of_them(sdk: openai.OpenAI) -> None:
    question = [{"role": "user", "content": "Is Rome in Italy?"}]
    text, _, _ = answer(
        sdk, messages=question, extra_body={"structured_outputs": {"choice": ["yes", "no"]}}
    )
    assert text in {"yes", "no"}


def repeats(text: str) -> int:
    """Words of ``text`` that are a repeat of an earlier one."""
    words = text.lower().replace(",", " ").replace(".", " ").split()
    return len(words) - len(set(words))


def test_penalties_make_an_answer_repeat_itself_less(sdk: openai.OpenAI) -> None:
    repeat = [{"role": "user", "content": "Write the word apple twenty times."}]
    free, _, _ = answer(sdk, messages=repeat, max_tokens=48)
    assert repeats(free) >= 4, free
    for penalty in (
        {"presence_penalty": 2.0},
        {"frequency_penalty": 2.0},
        {"extra_body": {"repetition_penalty": 2.0}},
    ):
        penalised, _, _ = answer(sdk, messages=repeat, max_tokens=48, **penalty)
        assert repeats(penalised) < repeats(free), (penalty, free, penalised)


def test_top_k_one_takes_a_likeliest_token_and_a_seed_repeats_one(sdk: openai.OpenAI) -> None:
    reply = sdk.chat.completions.create(
        model="small",
        messages=COUNT,
        max_tokens=12,
        temperature=1.5,
        logprobs=True,
        top_logprobs=2,
        extra_body={"top_k": 1},
    )
    logprobs = reply.choices[0].logprobs
    assert logprobs is not None and logprobs.content
    for token in logprobs.content:
        # Only a likeliest token is left to sample, however hot the temperature (not
        # "the greedy answer": bfloat16 logits may tie, and a tie may go either way).
        assert token.top_logprobs[0].logprob == pytest.approx(token.logprob)
    first = answer(sdk, temperature=1.5, seed=11)[0]
    assert answer(sdk, temperature=1.5, seed=11)[0] == first


def test_min_tokens_holds_off_the_end(sdk: openai.OpenAI) -> None:
    short = [{"role": "user", "content": "What is 2 + 2?"}]
    _, finish, tokens = answer(sdk, messages=short, max_tokens=64)
    assert finish == "stop"  # the model ended the answer itself
    wanted = tokens + 6
    _, _, held = answer(
        sdk, messages=short, max_tokens=wanted + 16, extra_body={"min_tokens": wanted}
    )
    assert held >= wanted


def test_an_unserved_field_is_refused_before_it_queues(sdk: openai.OpenAI) -> None:
    prediction = {"type": "content", "content": "1, 2, 3, 4, 5"}
    with pytest.raises(openai.BadRequestError, match="prediction"):
        answer(sdk, prediction=prediction)


def test_logprobs_come_per_token_streamed_or_not(sdk: openai.OpenAI) -> None:
    reply = sdk.chat.completions.create(
        model="small", messages=COUNT, max_tokens=12, temperature=0, logprobs=True, top_logprobs=3
    )
    choice = reply.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content is not None
    tokens = choice.logprobs.content
    assert reply.usage is not None and len(tokens) == reply.usage.completion_tokens
    assert "".join(t.token for t in tokens) == choice.message.content
    for token in tokens:
        assert len(token.top_logprobs) == 3
        # Greedy: the token taken is a likeliest one (bfloat16 logits may tie, and a
        # tie may be listed first under another token).
        assert token.top_logprobs[0].logprob == pytest.approx(token.logprob)
        assert token.logprob <= 0

    text, streamed_tokens = "", []
    stream = sdk.chat.completions.create(
        model="small", messages=COUNT, max_tokens=12, temperature=0, logprobs=True, stream=True
    )
    for chunk in stream:
        for part in chunk.choices:
            text += part.delta.content or ""
            if part.logprobs is not None and part.logprobs.content:
                streamed_tokens += part.logprobs.content
    assert text == choice.message.content
    assert [t.token for t in streamed_tokens] == [t.token for t in tokens]
    assert all(t.top_logprobs == [] for t in streamed_tokens)


def test_a_schema_that_is_no_json_schema_is_a_400_and_the_engine_goes_on(
    sdk: openai.OpenAI,
) -> None:
    # Checked where the request comes in (schemas.sampling): never queued, never run.
    bad = {"type": "json_schema", "json_schema": {"name": "x", "schema": {"type": "no-such"}}}
    with pytest.raises(openai.BadRequestError, match=r"not a valid JSON schema.*no-such"):
        answer(sdk, response_format=bad)
    assert answer(sdk, max_tokens=4)[0]


def test_logit_bias_forces_and_bans_tokens(sdk: openai.OpenAI, e2e_settings: Settings) -> None:
    folder = tokenizer_file(e2e_settings, Tier.SMALL)
    assert folder is not None
    tokenizer = Tokenizer.from_file(str(folder / "tokenizer.json"))
    [banana] = tokenizer.encode("banana", add_special_tokens=False).ids[:1]
    forced, _, _ = answer(sdk, max_tokens=4, logit_bias={str(banana): 100})
    assert forced == tokenizer.decode([banana] * 4)
    free, _, _ = answer(sdk, max_tokens=4)
    [first] = tokenizer.encode(free, add_special_tokens=False).ids[:1]
    banned, _, _ = answer(sdk, max_tokens=4, logit_bias={str(first): -100})
    assert tokenizer.encode(banned, add_special_tokens=False).ids[:1] != [first]
