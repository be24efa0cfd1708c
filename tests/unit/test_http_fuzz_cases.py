"""The HTTP and submit fuzz cases, and the input checks their first runs called for."""

from __future__ import annotations

import math

import pytest
from pydantic import ValidationError

from bench.http_cases import http_cases
from bench.submit_fuzz import submit_cases
from producer.gateway.errors import GatewayError
from producer.gateway.serving.common import resume_point
from schemas.jobs import could_be_job_id
from schemas.requests import EnqueueOptions, GenerationRequest

KEYS = ["llmq-a", "llmq-b"]
HI = [{"role": "user", "content": "hi"}]


def test_the_same_seed_draws_the_same_cases() -> None:
    first = http_cases(200, 3, api_keys=KEYS, other_job_ids=["f" * 32])
    assert first == http_cases(200, 3, api_keys=KEYS, other_job_ids=["f" * 32])
    assert first != http_cases(200, 4, api_keys=KEYS, other_job_ids=["f" * 32])
    assert repr(submit_cases(100, 3)) == repr(submit_cases(100, 3))


def test_cases_with_bad_credentials_come_last() -> None:
    cases = http_cases(500, 0, api_keys=KEYS)
    flags = [case.authenticated for case in cases]
    assert False in flags
    assert flags == sorted(flags, reverse=True)
    assert len({case.kind for case in cases}) >= 10


def test_every_header_is_one_a_client_can_send() -> None:
    for case in http_cases(500, 1, api_keys=KEYS):
        for name, value in case.headers:
            assert name and all(0x21 <= byte < 0x7F for byte in name), name
            assert all(byte >= 0x20 or byte == 0x09 for byte in value), value
            assert 0x7F not in value


@pytest.mark.parametrize(
    "fields",
    [
        {"messages": [{"role": "user", "content": "hi \ud800"}]},
        {"messages": HI, "stop": ["\udcff"]},
        {"messages": HI, "metadata": {"k": "\ud83d"}},
        {"messages": HI, "metadata": {"\ud800": "v"}},
        {"messages": HI, "conversation_id": "\ud800"},
        # Stored in text columns at the job's end, which cannot hold NUL on PostgreSQL.
        {"messages": [{"role": "user", "content": "hi \x00"}]},
        {"messages": HI, "conversation_id": "c\x00"},
        {"messages": HI, "metadata": {"k": math.nan}},
        {"messages": HI, "metadata": {"k": -math.inf}},
        {"messages": HI, "seed": 2**64},
        {"messages": HI, "seed": -(2**63) - 1},
    ],
)
def test_requests_the_database_or_an_engine_cannot_take_are_refused(
    fields: dict[str, object],
) -> None:
    with pytest.raises(ValidationError):
        GenerationRequest.model_validate(fields)


def test_the_edges_of_what_is_accepted() -> None:
    request = GenerationRequest.model_validate(
        {"messages": [{"role": "user", "content": "hi 🙂 \x7f"}], "seed": 2**64 - 1}
    )
    assert request.seed == 2**64 - 1
    assert GenerationRequest.model_validate({"messages": HI, "metadata": {"k": 1e308}})


@pytest.mark.parametrize("field", ["idempotency_key", "owner"])
@pytest.mark.parametrize("value", ["a\x00b", "\ud800"])
def test_options_stored_in_text_columns_refuse_nul_and_lone_surrogates(
    field: str, value: str
) -> None:
    with pytest.raises(ValidationError):
        EnqueueOptions.model_validate({field: value})


@pytest.mark.parametrize("seq", ["\u00b2", "\u00b9", "\uff11", "1" * 19, "-1", "1e3", ""])
def test_a_last_event_id_with_an_odd_sequence_number_is_a_400(seq: str) -> None:
    with pytest.raises(GatewayError) as raised:
        resume_point(f"{'a' * 32}.{seq}")
    assert raised.value.http.status == 400


def test_a_last_event_id_resumes_after_its_sequence_number() -> None:
    assert resume_point(f"{'a' * 32}.7") == ("a" * 32, 7)
    assert resume_point(f"{'a' * 32}.{'9' * 18}") == ("a" * 32, 10**18 - 1)


@pytest.mark.parametrize(
    ("job_id", "possible"),
    [("a" * 32, True), ("a" * 33, False), ("", False), ("a\x00", False), ("\ud800", False)],
)
def test_ids_no_job_can_have_are_known_before_the_database_is_asked(
    job_id: str, possible: bool
) -> None:
    assert could_be_job_id(job_id) is possible
