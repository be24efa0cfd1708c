"""Embeddings end to end: the official openai SDK, the gateway, Redis, PostgreSQL and a
real ``llmq worker --tier embed`` running the bundled all-MiniLM-L6-v2.

The embedding worker is cheap (sentence-transformers on the CPU), so this module starts
its own on its own Redis and PostgreSQL databases and never needs the session's vLLM
worker.
"""

from __future__ import annotations

import asyncio
import io
import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import openai
import pytest
import redis

from producer.aio import AsyncClient
from producer.client import Client
from producer.embeddings import vectors_of
from schemas.errors import EngineError
from schemas.queues import Tier
from schemas.settings import Settings
from tests.conftest import INTEGRATION_REDIS_DB, REDIS_BASE, job_row, postgres_database
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import auth, new_key
from workers.embeddings.model import BUNDLED_EMBED_MODEL, SentenceEmbedder, embed_model_dir
from workers.supervise import start_worker_process, stop_process, wait_until_warm

pytestmark = pytest.mark.e2e

TEXTS = ["How do I reset my password?", "I forgot my password", "What are your opening hours?"]


@pytest.fixture(scope="module")
def settings(tmp_path_factory: pytest.TempPathFactory) -> Settings:
    redis_url = f"{REDIS_BASE}/{INTEGRATION_REDIS_DB}"
    redis.Redis.from_url(redis_url).flushdb()
    database_url = postgres_database("llmq_e2e_embed")
    return Settings(
        broker_url=redis_url,
        database_url=database_url,
        model_cache_dir=tmp_path_factory.mktemp("cache"),
    )


@pytest.fixture(scope="module")
def gateway_url(settings: Settings) -> Iterator[str]:
    with running_gateway(settings) as url:
        yield url


@pytest.fixture(scope="module")
def embed_worker(settings: Settings, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    log_path: Path = tmp_path_factory.mktemp("worker") / "embed.log"
    with log_path.open("wb") as log:
        process = start_worker_process(settings, Tier.EMBED, output=log)
    try:
        yield wait_until_warm(settings, Tier.EMBED, process, timeout=300)
    except EngineError as exc:
        pytest.fail(f"{exc}:\n{log_path.read_text()[-4000:]}")
    finally:
        stop_process(process)


def test_without_an_embedding_worker_a_call_is_a_clear_503(
    settings: Settings, gateway_url: str
) -> None:
    # Runs first: no embedding worker has started yet on this module's Redis.
    response = httpx.post(
        gateway_url + "/v1/embeddings",
        json={"model": "embed", "input": "hello"},
        headers=auth(new_key(settings, "early")),
    )
    assert response.status_code == 503, response.text
    error = response.json()["error"]
    assert error["code"] == "no_warm_worker"
    assert "no worker serves the embed tier" in error["message"]


def test_the_openai_sdk_gets_the_models_own_vectors_through_the_queue(
    settings: Settings, gateway_url: str, embed_worker: str
) -> None:
    key = new_key(settings, "retrieval")
    sdk = openai.OpenAI(base_url=gateway_url + "/v1", api_key=key)
    # The SDK asks for base64 by default and decodes it; float is asked for by name.
    answer = sdk.embeddings.create(model="embed", input=TEXTS)
    floats = sdk.embeddings.create(model="embed", input=TEXTS, encoding_format="float")
    vectors = np.array([item.embedding for item in answer.data])
    assert [item.index for item in answer.data] == [0, 1, 2]
    assert vectors.shape == (3, 384)
    np.testing.assert_allclose(np.array([i.embedding for i in floats.data]), vectors, atol=1e-6)
    # The very vectors sentence-transformers gives for these texts, normalised.
    model = SentenceEmbedder.load(embed_model_dir(BUNDLED_EMBED_MODEL))
    direct = model.embed(TEXTS)
    np.testing.assert_allclose(vectors, direct.vectors, atol=1e-5)
    np.testing.assert_allclose(np.linalg.norm(vectors, axis=1), 1.0, atol=1e-5)
    assert vectors[0] @ vectors[1] > vectors[0] @ vectors[2]
    assert answer.usage.prompt_tokens == direct.prompt_tokens > len(TEXTS) * 2

    # The job is a row owned by the key, seen by it alone.
    job_id = answer.id  # type: ignore[attr-defined]
    row = job_row(settings.database_url, job_id)
    assert (row.tier, row.status, row.priority) == ("embed", "done", "interactive")
    assert row.prompt_tokens == direct.prompt_tokens
    assert row.request == {"input": TEXTS, "encoding_format": "base64"}  # the SDK's default
    own = httpx.get(f"{gateway_url}/v1/jobs/{job_id}", headers=auth(key))
    assert own.status_code == 200, own.text
    other = httpx.get(f"{gateway_url}/v1/jobs/{job_id}", headers=auth(new_key(settings, "x")))
    assert other.status_code == 404


def test_bad_fields_are_400s_naming_them(
    settings: Settings, gateway_url: str, embed_worker: str
) -> None:
    headers = auth(new_key(settings, "bad"))
    for body, named in [
        ({"model": "embed", "input": "a", "dimensions": 64}, "dimensions"),
        ({"model": "embed", "input": [[101, 102]]}, "input"),
        ({"model": "embed", "input": ""}, "input"),
        ({"model": "embed", "input": "a", "encoding_format": "int8"}, "encoding_format"),
    ]:
        response = httpx.post(gateway_url + "/v1/embeddings", json=body, headers=headers)
        assert response.status_code == 400, response.text
        assert named in response.json()["error"]["message"]
    unknown = httpx.post(
        gateway_url + "/v1/embeddings", json={"model": "small", "input": "a"}, headers=headers
    )
    assert unknown.status_code == 404


def test_the_python_clients_submit_embeddings(settings: Settings, embed_worker: str) -> None:
    with Client(settings) as client:
        result = client.submit_embeddings("hello", owner="svc").result(timeout=60)
    assert result.tier == Tier.EMBED
    (vector,) = vectors_of(result)
    assert len(vector) == 384

    async def asynchronous() -> list[list[float]]:
        async with AsyncClient(settings) as client:
            handle = await client.submit_embeddings(["a", "b"], priority="batch")
            return vectors_of(await handle.result(timeout=60))

    assert len(asyncio.run(asynchronous())) == 2


def test_a_batch_of_embeddings_lines_completes(
    settings: Settings, gateway_url: str, embed_worker: str
) -> None:
    sdk = openai.OpenAI(base_url=gateway_url + "/v1", api_key=new_key(settings, "batch"))
    lines = [
        {"custom_id": "one", "body": {"model": "embed", "input": TEXTS[0]}},
        {
            "custom_id": "two",
            "body": {"model": "embed", "input": TEXTS[1:], "encoding_format": "base64"},
        },
        {"custom_id": "bad", "body": {"model": "embed", "input": "a", "dimensions": 8}},
    ]
    data = "".join(
        json.dumps({"method": "POST", "url": "/v1/embeddings", **line}) + "\n" for line in lines
    )
    uploaded = sdk.files.create(file=("e.jsonl", io.BytesIO(data.encode())), purpose="batch")
    batch = sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/embeddings", completion_window="24h"
    )
    deadline = time.monotonic() + 120
    while (batch := sdk.batches.retrieve(batch.id)).status not in ("completed", "failed"):
        assert time.monotonic() < deadline, f"batch still {batch.status}"
        time.sleep(0.5)
    assert batch.status == "completed"
    assert batch.output_file_id is not None and batch.error_file_id is not None
    output = {
        line["custom_id"]: line["response"]["body"]
        for line in map(json.loads, sdk.files.content(batch.output_file_id).text.splitlines())
    }
    assert sorted(output) == ["one", "two"]
    assert len(output["one"]["data"][0]["embedding"]) == 384
    encoded = [item["embedding"] for item in output["two"]["data"]]
    assert all(isinstance(item, str) for item in encoded) and len(encoded) == 2
    (error,) = map(json.loads, sdk.files.content(batch.error_file_id).text.splitlines())
    assert error["custom_id"] == "bad" and "dimensions" in error["error"]["message"]
