"""run_job against real Redis and PostgreSQL, with a scripted engine in place of vLLM.

The real engine is covered end to end in tests/e2e; here the engine is scripted so
that the job runner's promises (row states, event order, errors) can be pinned down.
"""

from __future__ import annotations

import asyncio
import threading
import time
from collections.abc import Iterator, Sequence
from dataclasses import replace

import pytest
import redis

from producer.aio import AsyncClient
from producer.client import Client
from schemas.db import make_engine, make_sessions
from schemas.errors import EngineDead, EngineError, JobFailed
from schemas.events import ErrorEvent, FinalEvent, TokenEvent
from schemas.jobs import JobStatus
from schemas.prompt_registry import PromptCatalog
from schemas.queues import Tier, event_log_key
from schemas.settings import Settings
from workers.append_combiner import AppendCombiner
from workers.engine.base import (
    BACKGROUND_PRIORITY,
    INTERACTIVE_PRIORITY,
    Delta,
    EngineRequest,
    SamplingOptions,
)
from workers.engine.vllm import merged_deltas
from workers.job_runner import run_job
from workers.scheduler import Scheduler, SloShare, SlotShares
from workers.scheduler_driver import SchedulerDriver
from workers.worker_runtime import WorkerRuntime

pytestmark = pytest.mark.integration


class ScriptedStream:
    """A scripted request's deltas, as the engine hands them over. With ``hold``, as
    the engine does for an answer that goes out in one piece: an empty delta at the
    first token, the whole answer at its end, and what it holds so far in ``held``."""

    def __init__(self, deltas: Iterator[Delta], *, hold: bool = False) -> None:
        self._deltas = deltas
        self._held: list[Delta] | None = [] if hold else None
        self._out = self._holding() if hold else deltas

    def __iter__(self) -> Iterator[Delta]:
        return self

    def __next__(self) -> Delta:
        return next(self._out)

    def close(self) -> None:
        for deltas in (self._out, self._deltas):
            close = getattr(deltas, "close", None)
            if close is not None:
                close()

    def held(self) -> Delta | None:
        parts = list(self._held or ())
        if not parts or parts[-1].finished:
            return None
        return merged_deltas(parts)

    def _holding(self) -> Iterator[Delta]:
        assert self._held is not None
        for delta in self._deltas:
            if not self._held:
                yield replace(delta, text="", finished=False)
            self._held.append(delta)
            if delta.finished:
                yield merged_deltas(self._held)


class ScriptedEngine:
    """Emits the given chunks; counts one token per whitespace-separated word of the
    prompt. With ``hold_batch``, a batch answer is held to its end as the engine holds
    it (``ScriptedStream``); otherwise every answer streams."""

    def __init__(
        self,
        chunks: Sequence[str],
        *,
        max_model_len: int = 4096,
        fail: bool = False,
        delay_s: float = 0.0,
        hold_batch: bool = False,
    ):
        self.chunks = list(chunks)
        self.hold_batch = hold_batch
        self.delay_s = delay_s
        self.prompts: list[list[int]] = []
        self._max_model_len = max_model_len
        self.fail = fail
        self.seen: list[SamplingOptions] = []
        self.rendered: list[list[dict[str, str]]] = []

    @property
    def max_model_len(self) -> int:
        return self._max_model_len

    def render_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        self.rendered.append(list(messages))
        return [1] * sum(len(m["content"].split()) for m in messages)

    def render_chat_with_tools(self, *_: object) -> None:
        return None  # a template without tools: they are written out as text

    def encode(self, text: str) -> list[int]:
        return [2] * len(text.split())

    def stream(
        self, request: EngineRequest, *, stop: threading.Event | None = None
    ) -> ScriptedStream:
        """Takes the request when called, as the real engine does; what it yields comes
        from ``deltas``, which a test's own scripted engine overrides."""
        options = request.options
        self.seen.append(options)
        self.prompts.append(request.prompt_token_ids)
        hold = self.hold_batch and not options.stream_tokens
        return ScriptedStream(self.deltas(options, request.request_id, stop), hold=hold)

    def deltas(
        self, options: SamplingOptions, request_id: str, stop: threading.Event | None
    ) -> Iterator[Delta]:
        """A delta per chunk, each one token; with ``fail``, ``EngineError`` at the second;
        nothing more once ``stop`` is set."""
        for index, chunk in enumerate(self.chunks):
            if self.fail and index == 1:
                raise EngineError("generation failed: device lost")
            if stop is not None and stop.wait(self.delay_s):
                return  # aborted, as the real engine does
            last = index == len(self.chunks) - 1
            yield Delta(chunk, index + 1, last, "length" if last else None)

    def in_flight(self) -> int:
        return 0

    def shutdown(self) -> None:
        pass


def runtime_for(settings: Settings, engine: ScriptedEngine) -> WorkerRuntime:
    """A worker's runtime around ``engine``, its stream events combined as a worker's are."""
    client = redis.Redis.from_url(settings.broker_url)
    return WorkerRuntime(
        settings=settings,
        tier=Tier.SMALL,
        worker_id="small-test@host",
        engine=engine,
        redis=client,
        sessions=make_sessions(make_engine(settings.database_url)),
        prompts=PromptCatalog(settings.prompts_dir),
        appends=AppendCombiner(client),
    )


def test_a_job_streams_in_order_and_records_its_outcome(integration_settings: Settings) -> None:
    engine = ScriptedEngine(["Hel", "lo", " there"])
    with Client(integration_settings) as client:
        handle = client.submit(
            {
                "messages": [{"role": "user", "content": "say hello"}],
                "max_tokens": 3,
                "temperature": 0,
            }
        )
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        events = list(handle.events(timeout=10))
        assert [e.seq for e in events] == [0, 1, 2, 3]
        assert [e.text for e in events if isinstance(e, TokenEvent)] == ["Hel", "lo", " there"]
        final = events[-1]
        assert isinstance(final, FinalEvent)
        assert final.text == "Hello there"
        assert final.usage.prompt_tokens == 2
        assert final.usage.completion_tokens == 3
        assert final.worker_id == "small-test@host"
        assert client.status(handle.job_id) is JobStatus.DONE
    assert engine.seen[0].max_tokens == 3
    assert engine.seen[0].temperature == 0


def test_a_finished_job_is_not_run_again(integration_settings: Settings) -> None:
    engine = ScriptedEngine(["once"])
    runtime = runtime_for(integration_settings, engine)
    with Client(integration_settings) as client:
        handle = client.submit("hi")
        run_job(runtime, handle.job_id)
        run_job(runtime, handle.job_id)
        assert len(engine.seen) == 1
        assert handle.result(timeout=5).text == "once"


def test_engine_failure_becomes_an_error_event_and_a_failed_row(
    integration_settings: Settings,
) -> None:
    engine = ScriptedEngine(["a", "b", "c"], fail=True)
    with Client(integration_settings) as client:
        handle = client.submit("hi")
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        with pytest.raises(JobFailed, match="device lost"):
            handle.result(timeout=5)
        assert client.status(handle.job_id) is JobStatus.FAILED


def test_prompt_over_the_engine_context_fails_clearly(integration_settings: Settings) -> None:
    engine = ScriptedEngine(["x"], max_model_len=16)
    with Client(integration_settings) as client:
        handle = client.submit(
            {
                "messages": [{"role": "user", "content": "one two three four five six"}],
                "max_tokens": 12,
            }
        )
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        events = list(handle.events(timeout=5))
    assert isinstance(events[-1], ErrorEvent)
    assert "context window of 16 tokens" in events[-1].message
    assert engine.seen == []


def test_unknown_job_ids_are_skipped(integration_settings: Settings) -> None:
    engine = ScriptedEngine(["x"])
    run_job(runtime_for(integration_settings, engine), "0" * 32)
    assert engine.seen == []


def test_a_reader_that_joins_mid_stream_gets_everything(integration_settings: Settings) -> None:
    chunks = [f"t{i} " for i in range(40)]
    engine = ScriptedEngine(chunks)
    runtime = runtime_for(integration_settings, engine)
    with Client(integration_settings) as client:
        handle = client.submit("hi")
        worker = threading.Thread(target=run_job, args=(runtime, handle.job_id))
        worker.start()
        late = list(handle.stream(timeout=10))
        worker.join()
        assert "".join(late) == "".join(chunks)
        for start in (0, 7, 40):
            resumed = list(client.events(handle.job_id, from_seq=start, timeout=5))
            assert [e.seq for e in resumed] == list(range(start, 41))


def test_after_the_replay_log_expires_the_row_still_answers(integration_settings: Settings) -> None:
    engine = ScriptedEngine(["kept ", "in sql"])
    with Client(integration_settings) as client:
        handle = client.submit("hi")
        run_job(runtime_for(integration_settings, engine), handle.job_id)
        redis.Redis.from_url(integration_settings.broker_url).delete(event_log_key(handle.job_id))
        (final,) = list(client.events(handle.job_id, timeout=10))
    assert isinstance(final, FinalEvent)
    assert final.text == "kept in sql"


def test_the_async_client_streams_the_same_events(integration_settings: Settings) -> None:
    engine = ScriptedEngine(["as", "ync"])
    runtime = runtime_for(integration_settings, engine)

    async def scenario() -> tuple[list[str], str]:
        async with AsyncClient(integration_settings) as client:
            handle = await client.submit("hi", tier="small")
            await asyncio.to_thread(run_job, runtime, handle.job_id)
            chunks = [chunk async for chunk in handle.stream(timeout=10)]
            result = await handle.result(timeout=10)
            return chunks, result.text

    chunks, text = asyncio.run(scenario())
    assert chunks == ["as", "ync"]
    assert text == "async"


def test_a_stream_subscribed_at_submit_gets_every_token_live(
    integration_settings: Settings,
) -> None:
    """Subscribed before the job existed, the reader has each token from pub/sub even
    with the replay log gone; a reader that subscribed after the job ran would find
    only the row's final text."""
    engine = ScriptedEngine(["sub", "scribed"])
    runtime = runtime_for(integration_settings, engine)
    broker = redis.Redis.from_url(integration_settings.broker_url)

    async def scenario() -> list[str]:
        async with AsyncClient(integration_settings) as client:
            handle = await client.submit("hi", tier="small", subscribe=True)
            await asyncio.to_thread(run_job, runtime, handle.job_id)
            broker.delete(event_log_key(handle.job_id))
            return [chunk async for chunk in handle.stream(timeout=10)]

    assert asyncio.run(scenario()) == ["sub", "scribed"]


def test_the_registered_system_prompt_comes_first_byte_for_byte(
    integration_settings: Settings,
) -> None:
    engine = ScriptedEngine(["ok"], max_model_len=8192)
    runtime = runtime_for(integration_settings, engine)
    request = {"messages": [{"role": "user", "content": "Where is my order?"}], "max_tokens": 4}
    with Client(integration_settings) as client:
        handle = client.submit({**request, "system_prompt": "support"})
        run_job(runtime, handle.job_id)
        assert handle.result(timeout=5).text == "ok"
    system, user = engine.rendered[0]
    assert system == {
        "role": "system",
        "content": runtime.prompts.registry.resolve("support@1").text,
    }
    assert user == {"role": "user", "content": "Where is my order?"}


class DyingEngine(ScriptedEngine):
    def deltas(self, *_: object) -> Iterator[Delta]:
        raise EngineDead("the engine process died: EngineCore exited")
        yield  # pragma: no cover - makes this a generator


def test_a_dead_engine_fails_the_job_and_stops_the_worker(integration_settings: Settings) -> None:
    stopped: list[bool] = []
    runtime = replace(
        runtime_for(integration_settings, DyingEngine(["x"])),
        on_engine_dead=lambda: stopped.append(True),
    )
    with Client(integration_settings) as client:
        handle = client.submit("hi")
        run_job(runtime, handle.job_id)
        with pytest.raises(JobFailed, match="the worker is restarting"):
            handle.result(timeout=5)
    assert stopped == [True]


def test_interactive_jobs_ask_the_engine_for_its_first_place(
    integration_settings: Settings,
) -> None:
    engine = ScriptedEngine(["ok"])
    runtime = runtime_for(integration_settings, engine)
    with Client(integration_settings) as client:
        urgent = client.submit("Where is my order?")
        bulk = client.submit("Summarise the day", priority="batch")
        run_job(runtime, bulk.job_id)
        run_job(runtime, urgent.job_id)
    assert [options.priority for options in engine.seen] == [
        BACKGROUND_PRIORITY,
        INTERACTIVE_PRIORITY,
    ]
    assert INTERACTIVE_PRIORITY < BACKGROUND_PRIORITY  # lower is scheduled first


class StampedEngine(ScriptedEngine):
    """A scripted engine that notes when each request was handed to it, and its priority."""

    def __init__(self, chunks: Sequence[str], *, delay_s: float) -> None:
        super().__init__(chunks, delay_s=delay_s)
        self.handed: list[tuple[float, int]] = []

    def deltas(
        self, options: SamplingOptions, request_id: str, stop: threading.Event | None
    ) -> Iterator[Delta]:
        self.handed.append((time.monotonic(), options.priority))
        return super().deltas(options, request_id, stop)


def test_a_batch_job_reaches_the_engine_only_after_an_interactive_first_token(
    integration_settings: Settings,
) -> None:
    """Its prefill would share the interactive request's prefill step and delay that
    first token; it waits for the token (0.3 s here) instead."""
    engine = StampedEngine(["a", "b"], delay_s=0.3)
    runtime = runtime_for(integration_settings, engine)
    request = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 2}
    with Client(integration_settings) as client:
        interactive = client.submit(request, priority="interactive")
        batch = client.submit(request, priority="batch")
        person = threading.Thread(target=run_job, args=(runtime, interactive.job_id))
        person.start()
        while not engine.handed:
            time.sleep(0.005)
        run_job(runtime, batch.job_id)
        person.join()
        statuses = (client.status(interactive.job_id), client.status(batch.job_id))
    (interactive_at, first), (batch_at, second) = engine.handed
    assert (first, second) == (INTERACTIVE_PRIORITY, BACKGROUND_PRIORITY)
    assert batch_at - interactive_at >= 0.25
    assert statuses == (JobStatus.DONE, JobStatus.DONE)


class SlowTokensEngine(ScriptedEngine):
    """A scripted engine whose tokens come ``delay_s`` apart, noting batch's share of
    ``share`` as it sends its last token."""

    def __init__(self, chunks: Sequence[str], *, delay_s: float, share: SloShare) -> None:
        super().__init__(chunks, delay_s=delay_s)
        self.share = share
        self.cuts_before_last: int | None = None

    def deltas(
        self, options: SamplingOptions, request_id: str, stop: threading.Event | None
    ) -> Iterator[Delta]:
        for delta in super().deltas(options, request_id, stop):
            if delta.finished:
                self.cuts_before_last = self.share.cuts
            yield delta


def test_slow_tokens_cut_batchs_share_while_the_answer_still_streams(
    integration_settings: Settings,
) -> None:
    """Twelve tokens 50 ms apart against an inter-token SLO of 40 ms: the first window of
    tokens is over the SLO, and the share is cut before the answer ends, not after."""
    share = SloShare(low=1, high=4, ttft_slo_s=10.0, itl_slo_s=0.04, clock=time.monotonic)
    engine = SlowTokensEngine([f"t{i} " for i in range(12)], delay_s=0.05, share=share)
    runtime = replace(
        runtime_for(integration_settings, engine),
        scheduling=SchedulerDriver(Scheduler(SlotShares(6, 1, 1), slo_share=share)),
    )
    request = {"messages": [{"role": "user", "content": "hi"}], "max_tokens": 12}
    with Client(integration_settings) as client:
        person = client.submit(request, priority="interactive")
        run_job(runtime, person.job_id)
        assert client.status(person.job_id) is JobStatus.DONE
    assert engine.cuts_before_last == 1
    assert share.share() == 2  # cut once from 4 (the hold after it kept it there)


def test_a_batch_job_frees_its_prefill_place_at_its_first_token(
    integration_settings: Settings,
) -> None:
    """A batch answer goes out in one piece; the engine marks its first token with an
    empty delta, and the next batch prompt may enter prefill from then on, not only
    once the whole answer is done."""
    engine = ScriptedEngine(["", "the whole answer"], delay_s=0.4)
    runtime = replace(
        runtime_for(integration_settings, engine),
        scheduling=SchedulerDriver(Scheduler(SlotShares(4, 1, 1), batch_prefills_at_once=1)),
    )
    request = {"messages": [{"role": "user", "content": "summarize"}], "max_tokens": 4}
    with Client(integration_settings) as client:
        batch = client.submit(request, priority="batch")
        job = threading.Thread(target=run_job, args=(runtime, batch.job_id))
        job.start()
        held: list[int] = []
        while job.is_alive():
            held.append(runtime.scheduling.scheduler.in_prefill())
            time.sleep(0.02)
        job.join()
        assert client.status(batch.job_id) is JobStatus.DONE
        assert client.job(batch.job_id).output_text == "the whole answer"
    # Held through the prefill (the first 0.4 s), free through the rest of the answer.
    assert 1 in held
    assert held[-1] == 0 and held.count(0) >= 5
