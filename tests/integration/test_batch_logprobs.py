"""Batch lines that ask for log probabilities, over real Redis and PostgreSQL: the worker's
job runner keeps each token's log probability on the job row, and the batch's output
lines carry them as the endpoint's own answer does."""

from __future__ import annotations

import io
import json
from typing import Any

import openai
import pytest

from schemas.settings import Settings
from tests.integration.test_batches import (
    batch_jobs,
    gateway_url,  # noqa: F401 (a fixture)
    jsonl,
    sdk,
    settings,  # noqa: F401 (a fixture)
    wait_for,
)
from tests.integration.test_completions import LogprobEngine
from tests.integration.test_gateway import new_key
from tests.integration.test_runner import runtime_for
from workers.job_runner import run_job

pytestmark = pytest.mark.integration


def run_batch(
    config: Settings, client: openai.OpenAI, endpoint: str, body: dict[str, object]
) -> dict[str, Any]:
    """One line's batch, its job run by the worker's job runner; its output line's body."""
    data = jsonl(json.dumps({"custom_id": "x", "method": "POST", "url": endpoint, "body": body}))
    uploaded = client.files.create(file=("l.jsonl", io.BytesIO(data)), purpose="batch")
    batch = client.batches.create(
        input_file_id=uploaded.id,
        endpoint=endpoint,  # type: ignore[arg-type]
        completion_window="24h",
    )
    wait_for(lambda: len(batch_jobs(config.database_url, batch.id)) == 1)
    [job] = batch_jobs(config.database_url, batch.id)
    run_job(runtime_for(config, LogprobEngine(["Hel", "lo"])), job.id)
    [job] = batch_jobs(config.database_url, batch.id)
    assert [[t["token"] for t in choice] for choice in job.output_logprobs or []] == [["Hel", "lo"]]
    done = client.batches.retrieve(batch.id)
    assert done.status == "completed" and done.output_file_id, done
    [line] = [json.loads(x) for x in client.files.content(done.output_file_id).text.splitlines()]
    body_: dict[str, Any] = line["response"]["body"]
    return body_


def test_a_chat_line_asking_for_logprobs_gets_them_in_its_output(
    settings: Settings,  # noqa: F811
    gateway_url: str,  # noqa: F811
) -> None:
    client = sdk(gateway_url, new_key(settings, "owner"))
    body = {
        "model": "small",
        "messages": [{"role": "user", "content": "hi"}],
        "max_tokens": 4,
        "logprobs": True,
        "top_logprobs": 1,
    }
    answer = run_batch(settings, client, "/v1/chat/completions", body)
    [choice] = answer["choices"]
    content = choice["logprobs"]["content"]
    assert [(t["token"], t["logprob"]) for t in content] == [("Hel", -1.0), ("lo", -2.0)]
    assert content[0]["top_logprobs"] == [{"token": "x", "logprob": -2.0, "bytes": None}]
    assert choice["message"]["content"] == "Hello"


def test_a_completions_line_asking_for_logprobs_gets_the_legacy_block(
    settings: Settings,  # noqa: F811
    gateway_url: str,  # noqa: F811
) -> None:
    client = sdk(gateway_url, new_key(settings, "owner"))
    body = {"model": "small", "prompt": "Once", "max_tokens": 4, "logprobs": 1}
    answer = run_batch(settings, client, "/v1/completions", body)
    [choice] = answer["choices"]
    assert choice["logprobs"]["tokens"] == ["Hel", "lo"]
    assert choice["logprobs"]["token_logprobs"] == [-1.0, -2.0]
    assert choice["logprobs"]["text_offset"] == [0, 3]
    assert choice["logprobs"]["top_logprobs"] == [{"Hel": -1.0, "x": -2.0}, {"lo": -2.0, "x": -3.0}]
