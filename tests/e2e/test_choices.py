"""Several choices (``n``) with the real engine, through the gateway, with the official
SDK: one engine request per choice, streamed and not, for chat and text completions."""

from __future__ import annotations

from collections.abc import Iterator

import openai
import pytest

from bench.compat import probe_server
from bench.compat_probes import PROBES
from schemas.settings import Settings
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import new_key

pytestmark = pytest.mark.e2e

COUNT = [{"role": "user", "content": "Count from one to ten in words."}]


@pytest.fixture(scope="module")
def sdk(e2e_settings: Settings, worker: str) -> Iterator[openai.OpenAI]:
    with running_gateway(e2e_settings) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key=new_key(e2e_settings, "choices"))


def test_two_chat_choices_streamed_and_not(sdk: openai.OpenAI) -> None:
    greedy = sdk.chat.completions.create(
        model="small", messages=COUNT, n=2, max_tokens=8, temperature=0
    )
    assert [c.index for c in greedy.choices] == [0, 1]
    texts = [c.message.content for c in greedy.choices]
    assert texts[0] and texts[0] == texts[1]  # greedy: the same answer twice
    assert greedy.usage is not None and greedy.usage.completion_tokens == 16

    # Sampled with a seed: each choice its own seed, so they differ, and repeat.
    sampled = sdk.chat.completions.create(
        model="small", messages=COUNT, n=2, max_tokens=8, temperature=1.5, seed=3
    )
    again = sdk.chat.completions.create(
        model="small", messages=COUNT, n=2, max_tokens=8, temperature=1.5, seed=3
    )
    pair = [c.message.content for c in sampled.choices]
    assert pair == [c.message.content for c in again.choices]
    assert pair[0] != pair[1]

    streamed: dict[int, str] = {}
    finish: dict[int, str] = {}
    for chunk in sdk.chat.completions.create(
        model="small", messages=COUNT, n=2, max_tokens=8, temperature=0, stream=True
    ):
        for part in chunk.choices:
            streamed[part.index] = streamed.get(part.index, "") + (part.delta.content or "")
            if part.finish_reason:
                finish[part.index] = part.finish_reason
    assert streamed == {0: texts[0], 1: texts[1]}
    assert finish == {0: "length", 1: "length"}


def test_two_text_completion_choices(sdk: openai.OpenAI) -> None:
    reply = sdk.completions.create(
        model="small", prompt="One, two, three,", n=2, max_tokens=6, temperature=0
    )
    assert [c.index for c in reply.choices] == [0, 1]
    assert reply.choices[0].text and reply.choices[0].text == reply.choices[1].text


def test_the_compat_probes_of_n_and_completions_pass(e2e_settings: Settings, worker: str) -> None:
    # Streamed n is test_two_chat_choices_streamed_and_not's, through the SDK.
    names = {"n", "completions", "completions_stream"}
    probes = [probe for probe in PROBES if probe.name in names]
    assert {probe.name for probe in probes} == names
    with running_gateway(e2e_settings) as url:
        key = new_key(e2e_settings, "compat")
        results = probe_server(url, key, "small", label="llmq", probes=probes)
    assert {name: result["passed"] for name, result in results.items()} == dict.fromkeys(
        names, True
    ), results
