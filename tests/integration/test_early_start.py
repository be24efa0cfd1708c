"""An interactive job starts in the engine from its message, before its row is claimed;
the row stays the truth (real Redis and database, a scripted engine)."""

from __future__ import annotations

import base64
import dataclasses
import json
import threading
from collections.abc import Iterator

import pytest

from producer.client import Client
from schemas.events import FinalEvent
from schemas.jobs import JobStatus
from schemas.messages import MAX_REQUEST_COPY_BYTES
from schemas.queues import queue_name
from schemas.settings import Settings
from tests.integration.test_runner import ScriptedEngine, runtime_for
from tests.integration.test_submit import queued_messages
from workers.app import make_app, start_on_receipt_of
from workers.early_start import start_on_receipt
from workers.engine.base import Delta, SamplingOptions
from workers.envelope import ReceivedJobMessage, read_job_message
from workers.job_runner import run_job
from workers.received_starts import JobHint
from workers.transport import job_message_received

pytestmark = pytest.mark.integration


class RecordingEngine(ScriptedEngine):
    """A scripted engine that records each request it was given and each abort."""

    def __init__(self, chunks: list[str]) -> None:
        super().__init__(chunks)
        self.request_ids: list[str] = []
        self.closed: list[str] = []
        self.read: list[str] = []

    def deltas(
        self, options: SamplingOptions, request_id: str, stop: threading.Event | None
    ) -> Iterator[Delta]:
        self.request_ids.append(request_id)
        return _Tracked(self, request_id, super().deltas(options, request_id, stop))


class _Tracked:
    def __init__(self, engine: RecordingEngine, request_id: str, inner: Iterator[Delta]) -> None:
        self._engine, self._id, self._inner = engine, request_id, inner

    def __iter__(self) -> Iterator[Delta]:
        return self

    def __next__(self) -> Delta:
        if self._id not in self._engine.read:
            self._engine.read.append(self._id)
        return next(self._inner)

    def close(self) -> None:
        self._engine.closed.append(self._id)


def hint_of(settings: Settings, job_id: str) -> JobHint | None:
    """What the job's message on the interactive queue carries, as the task gets it."""
    for message in queued_messages(settings).get(queue_name("small", "interactive"), []):
        args, kwargs, _embed = json.loads(base64.b64decode(str(message["body"])))
        if args == [job_id]:
            return JobHint(**kwargs) if kwargs else None
    raise AssertionError(f"no message for job {job_id}")


def test_an_interactive_job_starts_from_its_message_and_finishes(
    integration_settings: Settings,
) -> None:
    engine = RecordingEngine(["Hel", "lo"])
    with Client(integration_settings) as client:
        handle = client.submit({"messages": [{"role": "user", "content": "say hi"}]})
        hint = hint_of(integration_settings, handle.job_id)
        assert hint is not None and hint.priority == "interactive"
        run_job(runtime_for(integration_settings, engine), handle.job_id, hint)
        final = list(handle.events(timeout=10))[-1]
        assert isinstance(final, FinalEvent) and final.text == "Hello"
        assert client.status(handle.job_id) is JobStatus.DONE
    (request_id,) = engine.request_ids
    assert "early" in request_id  # one engine request, the one started before the claim
    assert engine.read == [request_id]


def test_batch_and_oversized_jobs_carry_no_copy(integration_settings: Settings) -> None:
    huge = "word " * (MAX_REQUEST_COPY_BYTES // 4)
    with Client(integration_settings) as client:
        batch = client.submit("hi", priority="batch")
        big = client.submit(huge)
        assert hint_of(integration_settings, big.job_id) is None
    args_by_queue = queued_messages(integration_settings)
    (batch_message,) = args_by_queue[queue_name("small", "batch")]
    _args, kwargs, _embed = json.loads(base64.b64decode(str(batch_message["body"])))
    assert kwargs == {} and batch.job_id in str(batch_message["headers"])


def test_a_copy_that_is_not_the_row_is_aborted_and_the_row_is_run(
    integration_settings: Settings,
) -> None:
    engine = RecordingEngine(["from the row"])
    with Client(integration_settings) as client:
        handle = client.submit({"messages": [{"role": "user", "content": "the real one"}]})
        hint = hint_of(integration_settings, handle.job_id)
        assert hint is not None
        forged = JobHint(
            request={**hint.request, "messages": [{"role": "user", "content": "forged words"}]},
            priority=hint.priority,
        )
        run_job(runtime_for(integration_settings, engine), handle.job_id, forged)
        assert handle.result(timeout=10).text == "from the row"
    early, ordinary = engine.request_ids
    assert early in engine.closed and early not in engine.read  # nothing of it was read
    assert ordinary.endswith("-1") and engine.read == [ordinary]
    assert [m[-1]["content"] for m in engine.rendered] == ["forged words", "the real one"]


def test_a_job_that_is_not_queued_aborts_its_early_start(integration_settings: Settings) -> None:
    engine = RecordingEngine(["once"])
    runtime = runtime_for(integration_settings, engine)
    with Client(integration_settings) as client:
        handle = client.submit("hi")
        hint = hint_of(integration_settings, handle.job_id)
        run_job(runtime, handle.job_id, hint)
        run_job(runtime, handle.job_id, hint)  # a duplicate message: the claim fails
        assert handle.result(timeout=5).text == "once"
    first, duplicate = engine.request_ids
    assert first != duplicate
    assert duplicate in engine.closed and duplicate not in engine.read


def test_a_job_started_on_receipt_is_taken_by_its_task(integration_settings: Settings) -> None:
    engine = RecordingEngine(["Hi", " there"])
    runtime = runtime_for(integration_settings, engine)
    with Client(integration_settings) as client:
        handle = client.submit("hi")
        hint = hint_of(integration_settings, handle.job_id)
        assert hint is not None
        start_on_receipt(runtime, handle.job_id, hint)
        (started,) = engine.request_ids
        assert engine.read == []  # started, and nothing read before the claim
        run_job(runtime, handle.job_id, hint)
        assert handle.result(timeout=10).text == "Hi there"
    assert engine.request_ids == [started] and engine.read == [started]
    assert len(runtime.received) == 0


def test_a_duplicate_started_on_receipt_is_aborted_when_its_claim_fails(
    integration_settings: Settings,
) -> None:
    engine = RecordingEngine(["once"])
    runtime = runtime_for(integration_settings, engine)
    with Client(integration_settings) as client:
        handle = client.submit("hi")
        hint = hint_of(integration_settings, handle.job_id)
        assert hint is not None
        start_on_receipt(runtime, handle.job_id, hint)
        start_on_receipt(runtime, handle.job_id, hint)  # the same message twice
        run_job(runtime, handle.job_id, hint)
        run_job(runtime, handle.job_id, hint)
        assert handle.result(timeout=5).text == "once"
    first, duplicate = engine.request_ids
    assert engine.read == [first]
    assert duplicate in engine.closed and duplicate not in engine.read


def message_of(settings: Settings, job_id: str) -> ReceivedJobMessage:
    """The job's queued message, read as the worker's transport reads it."""
    for messages in queued_messages(settings).values():
        for raw in messages:
            message = read_job_message(raw)
            if message.job_id == job_id:
                return message
    raise AssertionError(f"no message for job {job_id}")


def test_the_worker_starts_an_interactive_job_when_its_message_is_read(
    integration_settings: Settings,
) -> None:
    engine = RecordingEngine(["ok"])
    app = make_app(integration_settings)
    app.runtime = runtime_for(integration_settings, engine)
    stop = start_on_receipt_of(app)
    try:
        with Client(integration_settings) as client:
            handle = client.submit("hi")
            batch = client.submit("later", priority="batch")
            received = message_of(integration_settings, handle.job_id)
            job_message_received.send(sender=None, message=received)
            job_message_received.send(
                sender=None, message=message_of(integration_settings, batch.job_id)
            )
            retry = dataclasses.replace(received, eta="2026-01-01T00:00:00+00:00")
            job_message_received.send(sender=None, message=retry)
    finally:
        stop()
    assert len(engine.request_ids) == 1  # the batch job and the retry wait for their tasks
    assert app.runtime.received.take(handle.job_id) is not None


@pytest.mark.parametrize("from_message", [True, False])
def test_the_final_event_says_how_long_the_engine_took_to_its_first_text(
    integration_settings: Settings, from_message: bool
) -> None:
    # The scripted engine waits this long before each chunk.
    engine = ScriptedEngine(["Hel", "lo"], delay_s=0.3)
    with Client(integration_settings) as client:
        handle = client.submit({"messages": [{"role": "user", "content": "say hi"}]})
        hint = hint_of(integration_settings, handle.job_id) if from_message else None
        run_job(runtime_for(integration_settings, engine), handle.job_id, hint)
        final = list(handle.events(timeout=10))[-1]
    assert isinstance(final, FinalEvent)
    engine_ttft_ms = final.timings.engine_ttft_ms
    assert engine_ttft_ms is not None and final.timings.ttft_ms is not None
    # One chunk's wait, not two; within the job's own time to first text.
    assert 300 <= engine_ttft_ms < 600
    assert engine_ttft_ms <= final.timings.ttft_ms
