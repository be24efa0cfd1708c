"""Client libraries nobody here wrote, unmodified, against the gateway and a real
worker: the official ``openai`` SDK (sync and async), LangChain's ``ChatOpenAI``,
LiteLLM and instructor. Each is used the way its documentation shows, with only the
base URL and key changed. Greedy decoding (temperature 0) makes a streamed answer
equal the plain one; answers are kept a few tokens long."""

from __future__ import annotations

import asyncio
import os
from collections.abc import Iterator
from typing import Any, Literal

import openai
import pytest
from pydantic import BaseModel

from schemas.settings import Settings
from tests.e2e.answers import stop_in_the_middle
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import new_key

pytestmark = pytest.mark.e2e

# LiteLLM fetches its model price list from the network at import unless told not to.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

COUNT = "Count from one to twenty in words, separated by commas."
CAPITAL = "What is the capital of Italy? Answer in JSON."


class Capital(BaseModel):
    """A closed answer: the engine's grammar keeps it short, so it always ends."""

    capital: Literal["Rome", "Milan", "Paris"]


@pytest.fixture(scope="module")
def gateway(e2e_settings: Settings, worker: str) -> Iterator[tuple[str, str]]:
    """The gateway's ``/v1`` base URL and an API key."""
    with running_gateway(e2e_settings) as url:
        yield url + "/v1", new_key(e2e_settings, "conformance")


@pytest.fixture(scope="module")
def sdk(gateway: tuple[str, str]) -> openai.OpenAI:
    base_url, key = gateway
    return openai.OpenAI(base_url=base_url, api_key=key)


def user(text: str) -> list[Any]:
    return [{"role": "user", "content": text}]


# --- the official openai SDK -----------------------------------------------------------


def test_openai_create_and_stream_give_the_same_answer_and_usage(sdk: openai.OpenAI) -> None:
    reply = sdk.chat.completions.create(
        model="small", messages=user(COUNT), max_tokens=12, temperature=0
    )
    text = reply.choices[0].message.content
    assert text and reply.choices[0].finish_reason in {"stop", "length"}
    assert reply.usage is not None and 0 < reply.usage.completion_tokens <= 12

    streamed, usage = "", None
    for chunk in sdk.chat.completions.create(
        model="small",
        messages=user(COUNT),
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    ):
        usage = chunk.usage or usage
        for choice in chunk.choices:
            streamed += choice.delta.content or ""
    assert streamed == text
    assert usage is not None and usage.completion_tokens == reply.usage.completion_tokens


def test_openai_stop_and_logprobs(sdk: openai.OpenAI) -> None:
    free = sdk.chat.completions.create(
        model="small", messages=user(COUNT), max_tokens=16, temperature=0
    )
    text = free.choices[0].message.content or ""
    stop = stop_in_the_middle(text)
    for stops in (stop, ["no such text", stop]):
        cut = sdk.chat.completions.create(
            model="small", messages=user(COUNT), max_tokens=16, temperature=0, stop=stops
        )
        assert cut.choices[0].message.content == text[: text.index(stop)]
        assert cut.choices[0].finish_reason == "stop"

    scored = sdk.chat.completions.create(
        model="small",
        messages=user(COUNT),
        max_tokens=6,
        temperature=0,
        logprobs=True,
        top_logprobs=2,
    )
    choice = scored.choices[0]
    assert choice.logprobs is not None and choice.logprobs.content
    tokens = [token.token for token in choice.logprobs.content]
    # An answer that ends by itself also scores its end token, as vLLM's server does.
    ended = choice.finish_reason == "stop"
    assert "".join(tokens[:-1] if ended else tokens) == choice.message.content
    assert all(len(token.top_logprobs) == 2 for token in choice.logprobs.content)


def test_openai_parse_fills_a_pydantic_model_through_json_schema(sdk: openai.OpenAI) -> None:
    reply = sdk.chat.completions.parse(
        model="small",
        messages=user(CAPITAL),
        response_format=Capital,
        max_tokens=32,
        temperature=0,
    )
    parsed = reply.choices[0].message.parsed
    assert isinstance(parsed, Capital)


def test_openai_async_client_creates_streams_and_parses(gateway: tuple[str, str]) -> None:
    base_url, key = gateway

    async def run() -> None:
        async with openai.AsyncOpenAI(base_url=base_url, api_key=key) as client:
            reply = await client.chat.completions.create(
                model="small", messages=user(COUNT), max_tokens=10, temperature=0
            )
            text = reply.choices[0].message.content
            assert text
            stream = await client.chat.completions.create(
                model="small", messages=user(COUNT), max_tokens=10, temperature=0, stream=True
            )
            streamed = ""
            async for chunk in stream:
                for choice in chunk.choices:
                    streamed += choice.delta.content or ""
            assert streamed == text
            parsed = await client.chat.completions.parse(
                model="small",
                messages=user(CAPITAL),
                response_format=Capital,
                max_tokens=32,
                temperature=0,
            )
            assert isinstance(parsed.choices[0].message.parsed, Capital)

    asyncio.run(run())


# --- LangChain -------------------------------------------------------------------------


@pytest.fixture(scope="module")
def chat_model(gateway: tuple[str, str]) -> Any:
    from langchain_openai import ChatOpenAI

    base_url, key = gateway
    return ChatOpenAI(model="small", base_url=base_url, api_key=key, max_tokens=12, temperature=0)


def test_langchain_invoke_stream_and_batch(chat_model: Any) -> None:
    answer = chat_model.invoke(COUNT)
    assert isinstance(answer.content, str) and answer.content
    assert answer.response_metadata["finish_reason"] in {"stop", "length"}
    assert answer.usage_metadata["output_tokens"] > 0
    assert "".join(chunk.content for chunk in chat_model.stream(COUNT)) == answer.content
    first, second = chat_model.batch([COUNT, "Name three colours."])
    assert first.content == answer.content
    assert second.content


def test_langchain_structured_output_through_json_schema(chat_model: Any) -> None:
    structured = chat_model.with_structured_output(Capital, method="json_schema")
    assert isinstance(structured.invoke(CAPITAL), Capital)


def test_langchain_bind_tools_gets_the_call_it_names(chat_model: Any) -> None:
    from langchain_core.tools import tool

    @tool
    def get_weather(city: Literal["Paris", "Rome", "Berlin"]) -> str:
        """The current weather in a city."""
        return "sunny"

    bound = chat_model.bind_tools([get_weather], tool_choice="get_weather", max_tokens=40)
    question = "What is the weather like in Paris?"
    [call] = bound.invoke(question).tool_calls
    assert call["name"] == "get_weather" and call["id"]
    assert call["args"]["city"] in {"Paris", "Rome", "Berlin"}
    # Streamed, the call comes in deltas that LangChain puts back together.
    message = None
    for chunk in bound.stream(question):
        message = chunk if message is None else message + chunk
    assert message is not None
    [streamed] = message.tool_calls
    assert (streamed["name"], streamed["args"]) == (call["name"], call["args"])


# --- LiteLLM ---------------------------------------------------------------------------


def test_litellm_completion_streamed_and_not(gateway: tuple[str, str]) -> None:
    import litellm

    base_url, key = gateway
    fields: dict[str, Any] = {
        "model": "openai/auto",
        "api_base": base_url,
        "api_key": key,
        "messages": user(COUNT),
        "max_tokens": 10,
        "temperature": 0,
    }
    reply = litellm.completion(**fields)
    text = reply.choices[0].message.content
    assert text
    assert reply.usage.completion_tokens > 0
    streamed = "".join(
        chunk.choices[0].delta.content or ""
        for chunk in litellm.completion(**fields, stream=True)
        if chunk.choices
    )
    assert streamed == text


# --- instructor ------------------------------------------------------------------------


def test_instructor_fills_a_pydantic_model_through_json_schema(sdk: openai.OpenAI) -> None:
    import instructor

    client = instructor.from_openai(sdk, mode=instructor.Mode.JSON_SCHEMA)
    answer = client.chat.completions.create(
        model="small",
        response_model=Capital,
        messages=user(CAPITAL),
        max_tokens=32,
        temperature=0,
        max_retries=0,
    )
    assert isinstance(answer, Capital)
