"""The official OpenAI SDK, unmodified, against the gateway and a real worker; Flower too."""

from __future__ import annotations

import logging
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import openai
import pytest

from producer.gateway.cli import flower_launch
from schemas.settings import Settings
from tests.gateway_server import free_port, running_gateway
from tests.integration.test_gateway import new_key
from workers.supervise import stop_process

pytestmark = pytest.mark.e2e

QUESTION = [{"role": "user", "content": "What is the capital of Italy?"}]


@pytest.fixture(scope="module")
def sdk(e2e_settings: Settings, worker: str) -> Iterator[openai.OpenAI]:
    with running_gateway(e2e_settings) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key=new_key(e2e_settings, "sdk"))


@pytest.mark.parametrize("model", ["auto", "small"])
def test_sdk_chat_completion(sdk: openai.OpenAI, model: str) -> None:
    reply = sdk.chat.completions.create(
        model=model,
        messages=QUESTION,
        max_tokens=12,
        temperature=0,  # type: ignore[arg-type]
    )
    assert reply.choices[0].message.content
    assert reply.choices[0].finish_reason in {"stop", "length"}
    assert reply.usage is not None and reply.usage.completion_tokens > 0
    assert reply.usage.total_tokens == reply.usage.prompt_tokens + reply.usage.completion_tokens


@pytest.mark.parametrize("model", ["auto", "small"])
def test_sdk_streaming(sdk: openai.OpenAI, model: str) -> None:
    stream = sdk.chat.completions.create(
        model=model,
        messages=QUESTION,  # type: ignore[arg-type]
        max_tokens=12,
        temperature=0,
        stream=True,
        stream_options={"include_usage": True},
    )
    text, finish, usage = "", None, None
    for chunk in stream:
        if chunk.usage is not None:
            usage = chunk.usage
        for choice in chunk.choices:
            text += choice.delta.content or ""
            finish = choice.finish_reason or finish
    assert text
    assert finish in {"stop", "length"}
    assert usage is not None and usage.completion_tokens > 0


MIXED_DIFFICULTY = [
    "what time do you open on sunday",
    "Where is my order?",
    "Compare your two subscription plans and say which suits a family of four.",
    "Write a Python function that merges overlapping intervals and explain its complexity.",
    "Prove that the square root of two is irrational, step by step.",
]


def test_auto_answers_every_difficulty_on_a_small_only_install(sdk: openai.OpenAI) -> None:
    """The default install serves small alone: auto sends what it would route higher
    to the nearest served tier, and says so in the headers; 100 requests, no error
    (the SDK raises on any)."""
    routed = set()
    no_retries = sdk.with_options(max_retries=0)  # a retried error would pass unseen
    for index in range(100):
        text = MIXED_DIFFICULTY[index % len(MIXED_DIFFICULTY)]
        raw = no_retries.chat.completions.with_raw_response.create(
            model="auto",
            messages=[{"role": "user", "content": text}],
            max_tokens=2,
            temperature=0,
        )
        assert raw.parse().choices[0].message.content is not None
        assert raw.headers["x-llmq-tier"] == "small"
        routed.add(raw.headers["x-llmq-routed-tier"])
    assert "large" in routed  # the classifier wanted large for the hard ones


def test_prompts_and_outputs_stay_out_of_the_worker_and_gateway_logs(
    sdk: openai.OpenAI, worker_log: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO)  # the gateway runs in this process
    secret = "card 4111-2222-3333-9876 expires 09/31"
    reply = sdk.chat.completions.create(
        model="small",
        messages=[{"role": "user", "content": f"Repeat after me: {secret}"}],
        max_tokens=24,
        temperature=0.0,
    )
    answer = reply.choices[0].message.content or ""
    worker_output = worker_log.read_text(errors="replace")
    assert "Task llmq.generate" in worker_output  # the worker's log is being written
    for text in (secret, "4111-2222", answer.strip()):
        if len(text) >= 8:
            assert text not in worker_output
            assert text not in caplog.text


def test_sdk_errors_are_typed(sdk: openai.OpenAI) -> None:
    with pytest.raises(openai.NotFoundError):
        sdk.chat.completions.create(model="gpt-9", messages=QUESTION)  # type: ignore[arg-type]
    with pytest.raises(openai.BadRequestError):
        sdk.chat.completions.create(model="small", messages=[])


def test_flower_lists_the_worker_and_its_queues(e2e_settings: Settings, worker: str) -> None:
    port = free_port()
    command, env = flower_launch(
        e2e_settings.broker_url, port=port, address="127.0.0.1", basic_auth=None, env=os.environ
    )
    flower = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        workers: dict[str, object] = {}
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and worker not in workers:
            time.sleep(1)
            try:
                workers = httpx.get(
                    f"http://127.0.0.1:{port}/api/workers", params={"refresh": "1"}, timeout=20
                ).json()
            except (httpx.HTTPError, ValueError):
                continue
        assert worker in workers, f"flower saw {list(workers)}"
        queues = {q["name"] for q in workers[worker]["active_queues"]}  # type: ignore[index]
        assert queues == {"llm.small.interactive", "llm.small.batch"}
    finally:
        # What Flower saw is the test; its stop is tests/integration/test_flower_stop.py.
        stop_process(flower, grace_s=10)
