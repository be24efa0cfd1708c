"""Batch lines may ask for log probabilities; a row's kept ones reach its output line,
each choice its own."""

from __future__ import annotations

import json

from producer.batches.lines import COMPLETIONS_ENDPOINT, parse_line
from producer.batches.views import output_line
from schemas.tables import Job


def token(text: str, value: float) -> dict[str, object]:
    return {"token": text, "logprob": value, "bytes": None, "top_logprobs": []}


def test_a_chat_or_completions_line_may_ask_for_logprobs() -> None:
    body = {
        "model": "small",
        "messages": [{"role": "user", "content": "hi"}],
        "logprobs": True,
        "top_logprobs": 3,
    }
    chat = parse_line(json.dumps({"custom_id": "a", "body": body}))
    assert chat.request["sampling"] == {"logprobs": 3}
    plain = parse_line(json.dumps({"custom_id": "b", "body": {**body, "top_logprobs": None}}))
    assert plain.request["sampling"] == {"logprobs": 0}
    prompt = {"model": "small", "prompt": "Once", "logprobs": 2}
    text = parse_line(
        json.dumps({"custom_id": "c", "url": COMPLETIONS_ENDPOINT, "body": prompt}),
        endpoint=COMPLETIONS_ENDPOINT,
    )
    assert text.request["sampling"] == {"logprobs": 2}


def test_each_choice_of_an_output_line_gets_its_own_logprobs() -> None:
    job = Job(
        id="j" * 32,
        tier="small",
        priority="batch",
        status="done",
        routing={"requested": "small"},
        request={
            "messages": [{"role": "user", "content": "hi"}],
            "n": 2,
            "sampling": {"logprobs": 0},
        },
        output_text="A",
        finish_reason="stop",
        output_choices=[
            {"index": 0, "text": "A", "finish_reason": "stop"},
            {"index": 1, "text": "B", "finish_reason": "stop"},
        ],
        output_logprobs=[[token("A", -0.5)], [token("B", -1.5)]],
        custom_id="x",
    )
    body = json.loads(output_line(job))["response"]["body"]
    contents = [c["logprobs"]["content"] for c in body["choices"]]
    assert [[t["token"] for t in content] for content in contents] == [["A"], ["B"]]
    assert contents[1][0]["logprob"] == -1.5

    without = Job(**{**_columns(job), "request": {"messages": [{"role": "user", "content": "hi"}]}})
    plain = json.loads(output_line(without))["response"]["body"]
    assert all(choice["logprobs"] is None for choice in plain["choices"])


def _columns(job: Job) -> dict[str, object]:
    return {column.key: getattr(job, column.key) for column in Job.__table__.columns}
