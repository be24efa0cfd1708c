"""The embedding tier's shapes and checks, without services: the tier name and its
queues, the gateway's request (400s naming the field), the stored request, the vectors'
travel as job text, the answer's shape and batch lines of ``/v1/embeddings``."""

from __future__ import annotations

import base64
import json

import numpy as np
import pytest
from pydantic import ValidationError

from producer.batches.lines import EMBEDDINGS_ENDPOINT, LineInvalid, parse_line
from producer.embeddings import prepare_embeddings
from producer.gateway.protocol.embeddings import EmbeddingsRequest, embeddings_list
from schemas.embeddings import (
    MAX_EMBED_INPUTS,
    EmbeddingRequest,
    pack_vectors,
    unpack_base64,
    unpack_vectors,
)
from schemas.errors import ConfigError, InvalidRequest
from schemas.events import Timings, Usage
from schemas.queues import BASE_TIERS, Priority, Tier, all_queues, kombu_queues, queue_name
from workers.memory_split import parse_tiers


def test_embed_is_a_tier_of_its_own_outside_the_base_tiers() -> None:
    assert Tier("embed") is Tier.EMBED
    assert Tier.EMBED.base is Tier.EMBED
    assert not Tier.EMBED.is_variant
    assert [t.value for t in Tier] == list(BASE_TIERS)  # auto never picks it
    assert queue_name(Tier.EMBED, Priority.INTERACTIVE) == "llm.embed.interactive"
    assert "llm.embed.batch" not in all_queues()
    assert {"llm.embed.interactive", "llm.embed.batch"} <= {q.name for q in kombu_queues()}
    with pytest.raises(ValueError):
        Tier("embed@int8")


def test_up_takes_the_embed_tier_beside_a_configured_one() -> None:
    assert parse_tiers("small,embed", [Tier.SMALL]) == [Tier.SMALL, Tier.EMBED]
    with pytest.raises(ConfigError, match="embed"):
        parse_tiers("small,embedding", [Tier.SMALL])


def body(**fields: object) -> dict[str, object]:
    return {"model": "embed", "input": "hello", **fields}


def test_input_is_one_text_or_a_list_of_texts() -> None:
    assert EmbeddingsRequest.model_validate(body()).texts == ["hello"]
    assert EmbeddingsRequest.model_validate(body(input=["a", "b"])).texts == ["a", "b"]


@pytest.mark.parametrize(
    ("fields", "named", "words"),
    [
        ({"input": [1, 2, 3]}, "input", "token-id input is not served"),
        ({"input": [[1, 2], [3]]}, "input", "token-id input is not served"),
        ({"input": []}, "input", "non-empty list"),
        ({"input": ["a", 3]}, "input", "list of strings"),
        ({"input": {"text": "a"}}, "input", "list of strings"),
        ({"dimensions": 128}, "dimensions", "dimensions is not served"),
        ({"encoding_format": "int8"}, "encoding_format", "float"),
        ({"truncate": True}, "truncate", "Extra inputs"),
        ({"priority": "urgent"}, "priority", "interactive"),
    ],
)
def test_a_field_llmq_does_not_serve_is_refused_by_name(
    fields: dict[str, object], named: str, words: str
) -> None:
    with pytest.raises(ValidationError) as caught:
        EmbeddingsRequest.model_validate(body(**fields))
    (error,) = caught.value.errors()
    assert error["loc"][0] == named
    assert words in error["msg"]


def test_the_stored_request_keeps_texts_user_and_encoding() -> None:
    request = EmbeddingsRequest.model_validate(
        body(input=["a"], user="u-1", encoding_format="base64")
    )
    stored = EmbeddingRequest.model_validate(request.to_llmq()).model_dump(mode="json")
    assert stored == {"input": ["a"], "user": "u-1", "encoding_format": "base64"}
    plain = EmbeddingsRequest.model_validate(body()).to_llmq()
    assert EmbeddingRequest.model_validate(plain).model_dump(mode="json") == {"input": ["hello"]}


@pytest.mark.parametrize(
    ("texts", "words"),
    [
        ([""], "input[0] is empty"),
        (["ok", "a\x00b"], "input[1] contains a NUL"),
        (["x" * 100_001], "characters"),
        (["\ud800"], "Unicode"),
        (["a"] * (MAX_EMBED_INPUTS + 1), "input"),
    ],
)
def test_submit_refuses_texts_a_job_cannot_hold(texts: list[str], words: str) -> None:
    with pytest.raises(InvalidRequest, match="input") as caught:
        prepare_embeddings(
            texts, priority="interactive", idempotency_key=None, owner=None, deadline_s=None
        )
    assert words in str(caught.value)


def test_submit_names_a_bad_enqueue_option() -> None:
    with pytest.raises(InvalidRequest, match="priority"):
        prepare_embeddings(
            "a", priority="urgent", idempotency_key=None, owner=None, deadline_s=None
        )
    with pytest.raises(InvalidRequest, match="input must be"):
        prepare_embeddings(
            b"bytes",  # type: ignore[arg-type]
            priority="batch",
            idempotency_key=None,
            owner=None,
            deadline_s=None,
        )


def test_the_same_texts_hash_alike_and_a_change_does_not() -> None:
    def hashed(texts: list[str], priority: str = "batch") -> str:
        return prepare_embeddings(
            texts, priority=priority, idempotency_key="k", owner="o", deadline_s=None
        ).request_hash

    assert hashed(["a", "b"]) == hashed(["a", "b"])
    assert hashed(["a", "b"]) != hashed(["b", "a"])
    assert hashed(["a"]) != hashed(["a"], "interactive")


def test_vectors_travel_as_openai_base64_and_back_exactly() -> None:
    vectors = np.array([[0.25, -1.5, 3.0], [1e-7, 0.0, -0.0]], dtype=np.float32)
    text = pack_vectors(vectors)
    rows = unpack_base64(text)
    # OpenAI's base64 form: little-endian float32, one string per input.
    assert np.frombuffer(base64.b64decode(rows[0]), dtype="<f4").tolist() == [0.25, -1.5, 3.0]
    assert unpack_vectors(text) == vectors.astype(float).tolist()
    for bad in ("hello", json.dumps({"a": 1}), json.dumps(["!!"]), json.dumps(["AAA="])):
        with pytest.raises(ValueError, match="no embeddings"):
            unpack_vectors(bad)


def test_the_answer_is_openais_list_of_embeddings() -> None:
    answer = embeddings_list(
        model="embed",
        vectors=[[0.5, 0.5], [1.0, 0.0]],
        usage=Usage(prompt_tokens=7, completion_tokens=0),
        timings=Timings(queue_wait_ms=1.0, ttft_ms=2.0, total_ms=2.0),
        job_id="j1",
        tier="embed",
    )
    assert answer["object"] == "list"
    assert answer["data"] == [
        {"object": "embedding", "index": 0, "embedding": [0.5, 0.5]},
        {"object": "embedding", "index": 1, "embedding": [1.0, 0.0]},
    ]
    assert answer["model"] == "embed"
    assert answer["usage"] == {"prompt_tokens": 7, "total_tokens": 7}
    assert answer["llmq"]["job_id"] == "j1"


def line(**fields: object) -> str:
    envelope = {"custom_id": "c1", "method": "POST", "url": EMBEDDINGS_ENDPOINT}
    return json.dumps({**envelope, "body": body(**fields)})


def test_an_embeddings_batch_line_becomes_an_embedding_request() -> None:
    parsed = parse_line(
        line(input=["a", "b"], encoding_format="base64"), endpoint=EMBEDDINGS_ENDPOINT
    )
    assert parsed.model == "embed"
    assert parsed.request == {"input": ["a", "b"], "encoding_format": "base64"}


@pytest.mark.parametrize(
    ("fields", "code", "words"),
    [
        ({"model": "small"}, "model_not_found", "unknown embedding model"),
        ({"input": [1, 2]}, "invalid_request", "input"),
        ({"dimensions": 64}, "invalid_request", "dimensions"),
        ({"input": ""}, "invalid_request", "input[0] is empty"),
        ({"stream": True}, "invalid_request", "stream"),
    ],
)
def test_a_bad_embeddings_line_names_its_problem(
    fields: dict[str, object], code: str, words: str
) -> None:
    with pytest.raises(LineInvalid) as caught:
        parse_line(line(**fields), endpoint=EMBEDDINGS_ENDPOINT)
    assert caught.value.code == code
    assert words in str(caught.value)
