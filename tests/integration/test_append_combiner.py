"""The worker's combined stream appends, on real Redis: every event, in order, once."""

from __future__ import annotations

import threading
from collections.abc import Callable
from pathlib import Path

import pytest
import redis
from redis.backoff import NoBackoff
from redis.retry import Retry

from bench.redis_server import RedisServer, free_port
from producer.streams import read_events
from schemas.events import TokenEvent, parse_event
from schemas.queues import event_channel, event_log_key
from schemas.settings import Settings
from schemas.stream_log import EventLog
from tests.integration.test_recovery import wait_until_down
from workers.append_combiner import AppendCombiner, _Append
from workers.publisher import StreamPublisher

STREAMS = 16
TOKENS = 20


class CountingCombiner(AppendCombiner):
    """Counts the round trips (one per batch sent)."""

    def __init__(
        self, client: redis.Redis, retry_delays_s: tuple[float, ...] = (0.1, 0.25, 0.5, 1.0, 2.0)
    ) -> None:
        super().__init__(client, retry_delays_s=retry_delays_s)
        self.batches: list[int] = []

    def _send(self, batch: list[_Append]) -> None:
        self.batches.append(len(batch))
        super()._send(batch)


def run_in_threads(run: Callable[[str], None], names: list[str], *, timeout_s: float) -> None:
    """``run(name)`` for each name, each in a thread of its own; all must end in time
    (daemon threads: one left hanging fails the test instead of holding pytest)."""
    threads = [threading.Thread(target=run, args=(name,), daemon=True) for name in names]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=timeout_s)
    assert not any(thread.is_alive() for thread in threads)


def run_streams(
    client: redis.Redis,
    combiner: AppendCombiner,
    jobs: list[str],
    *,
    halfway: threading.Barrier | None = None,
    go_on: threading.Event | None = None,
) -> None:
    """Each job's tokens from its own thread, all starting together; with ``halfway``,
    every thread meets there after half of its tokens and waits for ``go_on``."""
    start = threading.Barrier(len(jobs))

    def run(job_id: str) -> None:
        publisher = StreamPublisher(client, job_id, ttl_s=60, combiner=combiner)
        start.wait()
        for i in range(TOKENS):
            if halfway is not None and go_on is not None and i == TOKENS // 2:
                halfway.wait()
                go_on.wait()
            publisher.token(f"{job_id}-{i}")
        publisher.error("end")

    run_in_threads(run, jobs, timeout_s=60)


def logged_texts(client: redis.Redis, job_id: str) -> list[str]:
    return [
        event.text
        for event in read_events(client, job_id, timeout=5)
        if isinstance(event, TokenEvent)
    ]


def test_concurrent_streams_get_every_event_live_and_logged_in_fewer_round_trips(
    integration_settings: Settings,
) -> None:
    client = redis.Redis.from_url(integration_settings.broker_url)
    combiner = CountingCombiner(client)
    jobs = [f"combined-{n}" for n in range(STREAMS)]
    with client.pubsub() as pubsub:  # type: ignore[no-untyped-call]
        pubsub.subscribe(*(event_channel(job_id) for job_id in jobs))
        run_streams(client, combiner, jobs)
        live: dict[str, list[int]] = {job_id: [] for job_id in jobs}
        while (message := pubsub.get_message(timeout=0.5)) is not None:
            if message["type"] == "message":
                channel = message["channel"].decode()
                job_id = next(j for j in jobs if event_channel(j) == channel)
                live[job_id].append(parse_event(message["data"]).seq)
    expected = list(range(TOKENS + 1))  # the tokens, then the error event
    for job_id in jobs:
        assert live[job_id] == expected
        assert logged_texts(client, job_id) == [f"{job_id}-{i}" for i in range(TOKENS)]
    events = STREAMS * (TOKENS + 1)
    assert sum(combiner.batches) == events  # each event sent once
    assert len(combiner.batches) < events / 2  # most went with others


def test_a_restart_mid_stream_loses_no_combined_event(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        combiner = CountingCombiner(client)
        jobs = [f"restarted-{n}" for n in range(4)]
        halfway, go_on = threading.Barrier(len(jobs) + 1), threading.Event()
        streams = threading.Thread(
            target=run_streams,
            args=(client, combiner, jobs),
            kwargs={"halfway": halfway, "go_on": go_on},
        )
        streams.start()
        halfway.wait(timeout=30)  # every stream has sent half of its tokens (or this raises)
        restart = threading.Thread(target=server.restart, kwargs={"down_s": 1.0})
        restart.start()
        wait_until_down(server.url)
        go_on.set()  # the rest go while Redis is down, then after it is back
        restart.join()
        streams.join(timeout=60)
        assert not streams.is_alive()
        for job_id in jobs:
            assert logged_texts(client, job_id) == [f"{job_id}-{i}" for i in range(TOKENS)]
    finally:
        server.stop()


def test_a_combined_batch_loads_the_script_a_restarted_redis_forgot(tmp_path: Path) -> None:
    server = RedisServer(tmp_path)
    server.start()
    try:
        client = redis.Redis.from_url(server.url)
        combiner = AppendCombiner(client, retry_delays_s=())
        logs = [EventLog(client, job_id, ttl_s=60) for job_id in ("s1", "s2")]
        sent = [TokenEvent(seq=0, text="a").model_dump_json()]
        client.script_flush()
        batch = [_Append(log, sent, 0) for log in logs]
        combiner._send(batch)
        assert all(item.done and item.error is None for item in batch)
        assert [log.entries() for log in logs] == [sent, sent]
        assert client.ttl(event_log_key("s1")) > 0
    finally:
        server.stop()


def test_an_outage_past_every_retry_raises_in_each_waiting_thread() -> None:
    # No retries of redis-py's own: the combiner's schedule is the one under test.
    client = redis.Redis(port=free_port(), socket_connect_timeout=0.1, retry=Retry(NoBackoff(), 0))
    combiner = AppendCombiner(client, retry_delays_s=(0.05,))
    errors: list[BaseException] = []

    def run(job_id: str) -> None:
        try:
            StreamPublisher(client, job_id, ttl_s=60, combiner=combiner).token("a")
        except redis.RedisError as exc:
            errors.append(exc)

    run_in_threads(run, [f"down-{n}" for n in range(4)], timeout_s=10)
    assert len(errors) == 4
    # Nothing is left holding the combiner: the next event is tried (and fails) too.
    with pytest.raises(redis.ConnectionError):
        StreamPublisher(client, "down-later", ttl_s=60, combiner=combiner).token("b")


def test_one_jobs_refused_log_fails_that_job_alone(integration_settings: Settings) -> None:
    client = redis.Redis.from_url(integration_settings.broker_url)
    combiner = CountingCombiner(client, retry_delays_s=(0.01,))
    jobs = [f"refused-{n}" for n in range(6)]
    client.set(event_log_key(jobs[0]), "not a list")  # every append to it is refused
    errors: dict[str, BaseException] = {}
    start = threading.Barrier(len(jobs))

    def run(job_id: str) -> None:
        publisher = StreamPublisher(client, job_id, ttl_s=60, combiner=combiner)
        start.wait()
        try:
            for i in range(TOKENS):
                publisher.token(f"{job_id}-{i}")
        except redis.RedisError as exc:
            errors[job_id] = exc

    run_in_threads(run, jobs, timeout_s=30)
    assert list(errors) == [jobs[0]]
    assert isinstance(errors[jobs[0]], redis.ResponseError)
    for job_id in jobs[1:]:
        assert EventLog(client, job_id, ttl_s=60).entries() == [
            TokenEvent(seq=i, text=f"{job_id}-{i}").model_dump_json() for i in range(TOKENS)
        ]
    assert max(combiner.batches) > 1  # the refused job was combined with others


class StoppingCombiner(CountingCombiner):
    """Its first sender of several events stops mid-send (an interrupt, a bug)."""

    stopped = False

    def _send(self, batch: list[_Append]) -> None:
        if len(batch) > 1 and not self.stopped:
            self.stopped = True
            raise RuntimeError("the sender stopped")
        super()._send(batch)


def test_a_sender_that_stops_leaves_the_others_events_to_the_next(
    integration_settings: Settings,
) -> None:
    client = redis.Redis.from_url(integration_settings.broker_url)
    combiner = StoppingCombiner(client)
    jobs = [f"stopping-{n}" for n in range(8)]
    stopped: list[str] = []
    start = threading.Barrier(len(jobs))

    def run(job_id: str) -> None:
        publisher = StreamPublisher(client, job_id, ttl_s=60, combiner=combiner)
        start.wait()
        for i in range(TOKENS):
            try:
                publisher.token(f"{job_id}-{i}")
            except RuntimeError:
                stopped.append(job_id)
                return

    run_in_threads(run, jobs, timeout_s=30)
    assert combiner.stopped and len(stopped) == 1
    for job_id in jobs:
        entries = EventLog(client, job_id, ttl_s=60).entries()
        # Every event sent, in order; the stopped thread's last one by a later sender.
        count = TOKENS if job_id not in stopped else len(entries)
        assert entries == [
            TokenEvent(seq=i, text=f"{job_id}-{i}").model_dump_json() for i in range(count)
        ]
        assert count > 0
