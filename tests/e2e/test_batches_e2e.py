"""A batch through the official openai SDK, the gateway and a real worker."""

from __future__ import annotations

import io
import json
import time
from collections.abc import Iterator

import openai
import pytest

from schemas.settings import Settings
from tests.e2e.test_gateway_e2e import MIXED_DIFFICULTY
from tests.gateway_server import running_gateway
from tests.integration.test_gateway import new_key

pytestmark = pytest.mark.e2e


def request_line(custom_id: str, question: str) -> str:
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": question}],
        "max_tokens": 6,
        "temperature": 0,
    }
    return json.dumps(
        {"custom_id": custom_id, "method": "POST", "url": "/v1/chat/completions", "body": body}
    )


@pytest.fixture(scope="module")
def sdk(e2e_settings: Settings, worker: str) -> Iterator[openai.OpenAI]:
    with running_gateway(e2e_settings) as url:
        yield openai.OpenAI(base_url=url + "/v1", api_key=new_key(e2e_settings, "batch"))


def submit(sdk: openai.OpenAI, lines: list[str]) -> str:
    data = ("\n".join(lines) + "\n").encode()
    uploaded = sdk.files.create(file=("batch.jsonl", io.BytesIO(data)), purpose="batch")
    batch = sdk.batches.create(
        input_file_id=uploaded.id, endpoint="/v1/chat/completions", completion_window="24h"
    )
    return batch.id


def wait_until(sdk: openai.OpenAI, batch_id: str, statuses: set[str], timeout: float) -> str:
    deadline = time.monotonic() + timeout
    while (status := sdk.batches.retrieve(batch_id).status) not in statuses:
        assert time.monotonic() < deadline, f"batch still {status}"
        time.sleep(0.5)
    return status


def test_a_batch_completes_with_one_result_per_custom_id(sdk: openai.OpenAI) -> None:
    # Mixed difficulty: auto would route the hard lines to tiers no worker serves here;
    # they go to the nearest served tier, or the batch would never complete.
    lines = [
        request_line(f"q{i}", f"{MIXED_DIFFICULTY[i % len(MIXED_DIFFICULTY)]} ({i})")
        for i in range(9)
    ]
    lines.insert(4, '{"custom_id": "broken", "body": ')
    batch_id = submit(sdk, lines)
    assert wait_until(sdk, batch_id, {"completed", "failed"}, timeout=240) == "completed"
    batch = sdk.batches.retrieve(batch_id)
    assert batch.request_counts is not None
    assert (batch.request_counts.total, batch.request_counts.completed) == (10, 9)
    assert batch.request_counts.failed == 1
    assert batch.output_file_id and batch.error_file_id
    output = [json.loads(x) for x in sdk.files.content(batch.output_file_id).text.splitlines()]
    assert sorted(x["custom_id"] for x in output) == sorted(f"q{i}" for i in range(9))
    for line in output:
        body = line["response"]["body"]
        assert line["response"]["status_code"] == 200
        assert body["choices"][0]["message"]["content"]
        assert 0 < body["usage"]["completion_tokens"] <= 6
    errors = sdk.files.content(batch.error_file_id).text.splitlines()
    assert len(errors) == 1 and json.loads(errors[0])["error"]["code"] == "invalid_request"


def test_cancel_stops_the_rest(sdk: openai.OpenAI) -> None:
    batch_id = submit(sdk, [request_line(f"c{i}", f"Count to {i}.") for i in range(40)])
    time.sleep(1.0)  # some lines reach the worker
    sdk.batches.cancel(batch_id)
    assert wait_until(sdk, batch_id, {"cancelled"}, timeout=60) == "cancelled"
    batch = sdk.batches.retrieve(batch_id)
    assert batch.request_counts is not None
    assert batch.request_counts.completed < 40
    assert batch.error_file_id is not None
    codes = {
        json.loads(x)["error"]["code"]
        for x in sdk.files.content(batch.error_file_id).text.splitlines()
    }
    assert codes == {"batch_cancelled"}
