"""Embedding jobs over real Redis and PostgreSQL: submit writes an owned row and a
message on the embedding tier's queue, and the worker's job function (with the real
bundled model) records and publishes the vectors; failures end the job with a reason."""

from __future__ import annotations

import json
from collections.abc import Iterator

import numpy as np
import pytest
import redis

from producer.client import Client
from producer.embeddings import vectors_of
from schemas.errors import EngineError, IdempotencyConflict, JobFailed, NoWarmWorker
from schemas.queues import Priority, Tier, queue_name
from schemas.settings import Settings
from tests.conftest import job_row
from workers.embeddings.model import (
    BUNDLED_EMBED_MODEL,
    Embedded,
    SentenceEmbedder,
    embed_model_dir,
)
from workers.embeddings.runner import EmbedRuntime, run_embedding_job

pytestmark = pytest.mark.integration


@pytest.fixture(scope="module")
def model() -> SentenceEmbedder:
    return SentenceEmbedder.load(embed_model_dir(BUNDLED_EMBED_MODEL))


@pytest.fixture
def client(integration_settings: Settings) -> Iterator[Client]:
    with Client(integration_settings, warm=False) as c:
        yield c


def runtime(client: Client, embed: object) -> EmbedRuntime:
    return EmbedRuntime(
        worker_id="embed-1-abc@test",
        sessions=client.sessions,
        redis=client.redis,
        embed=embed,  # type: ignore[arg-type]
        replay_ttl_s=60,
    )


def queued_ids(settings: Settings, priority: Priority) -> list[str]:
    broker = redis.Redis.from_url(settings.broker_url)
    raw = broker.lrange(queue_name(Tier.EMBED, priority), 0, -1)
    broker.close()
    return [json.loads(m)["headers"]["id"] for m in raw]


def test_a_job_is_an_owned_row_on_the_embed_queue_answered_with_the_models_vectors(
    client: Client, integration_settings: Settings, model: SentenceEmbedder
) -> None:
    handle = client.submit_embeddings(["red apple", "green pear"], owner="svc")
    assert queued_ids(integration_settings, Priority.INTERACTIVE) == [handle.job_id]
    row = job_row(integration_settings.database_url, handle.job_id)
    assert (row.tier, row.owner, row.status) == ("embed", "svc", "queued")

    run_embedding_job(runtime(client, model.embed), handle.job_id)
    result = handle.result(timeout=10)
    vectors = np.array(vectors_of(result))
    expected = model.embed(["red apple", "green pear"])
    np.testing.assert_allclose(vectors, expected.vectors, atol=1e-6)
    assert result.usage.prompt_tokens == expected.prompt_tokens
    row = job_row(integration_settings.database_url, handle.job_id)
    assert (row.status, row.prompt_tokens, row.completion_tokens) == ("done", 8, 0)
    assert row.output_text == result.text
    # Its message taken again (a redelivery): the ended job is skipped.
    run_embedding_job(runtime(client, model.embed), handle.job_id)
    assert job_row(integration_settings.database_url, handle.job_id).attempts == 1


def test_a_model_failure_ends_the_job_with_its_reason(client: Client) -> None:
    def failing(_texts: list[str]) -> Embedded:
        raise EngineError("the embedding model failed: out of memory")

    handle = client.submit_embeddings("hello", priority="batch")
    run_embedding_job(runtime(client, failing), handle.job_id)
    with pytest.raises(JobFailed, match="out of memory"):
        handle.result(timeout=10)
    assert client.status(handle.job_id) == "failed"


def test_idempotency_keys_belong_to_their_owner(
    client: Client, integration_settings: Settings
) -> None:
    first = client.submit_embeddings(["a"], owner="o1", idempotency_key="k", priority="batch")
    again = client.submit_embeddings(["a"], owner="o1", idempotency_key="k", priority="batch")
    assert again.job_id == first.job_id
    assert queued_ids(integration_settings, Priority.BATCH) == [first.job_id]
    with pytest.raises(IdempotencyConflict):
        client.submit_embeddings(["b"], owner="o1", idempotency_key="k", priority="batch")
    other = client.submit_embeddings(["a"], owner="o2", idempotency_key="k", priority="batch")
    assert other.job_id != first.job_id


def test_no_embedding_worker_refuses_a_job_that_needs_one(
    client: Client, integration_settings: Settings
) -> None:
    with pytest.raises(NoWarmWorker, match="embed tier"):
        client.submit_embeddings("hello", require_warm_worker=True)
    assert queued_ids(integration_settings, Priority.INTERACTIVE) == []
