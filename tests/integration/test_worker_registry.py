"""The worker registry in real Redis: found through the known workers, not a key scan."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import redis

from producer.status import live_workers, render_status
from schemas.queues import KNOWN_WORKERS_KEY, Tier, event_log_key, worker_key
from schemas.settings import Settings, TierConfig
from workers.registry import EXPIRY_S, EngineTiming, WorkerRegistration
from workers.scheduler import Scheduler, SloShare, SlotShares, slot_shares

CPU_TIMING = EngineTiming(first_token_s=0.045, step_s=0.040)

pytestmark = pytest.mark.integration


@pytest.fixture
def client(integration_settings: Settings) -> Iterator[redis.Redis]:
    connection = redis.Redis.from_url(integration_settings.broker_url)
    yield connection
    connection.close()


def registration(client: redis.Redis, worker_id: str, tier: Tier) -> WorkerRegistration:
    return WorkerRegistration(client, worker_id=worker_id, tier=tier, concurrency=4)


def test_workers_are_found_among_many_other_keys_without_a_key_scan(
    client: redis.Redis, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Replay logs of finished jobs outnumber workers by far in a busy deployment.
    pipe = client.pipeline(transaction=False)
    for index in range(2000):
        pipe.rpush(event_log_key(f"job-{index}"), "{}")
    pipe.execute()
    registration(client, "large-1@b", Tier.LARGE)._write()
    registration(client, "small-1@a", Tier.SMALL).mark_warm(CPU_TIMING)

    def no_scan(*_args: object, **_kwargs: object) -> None:
        raise AssertionError("the registry was read by scanning every key")

    monkeypatch.setattr(client, "scan_iter", no_scan)
    monkeypatch.setattr(client, "scan", no_scan)
    workers = live_workers(client)

    assert [(w.worker_id, w.tier, w.warm) for w in workers] == [
        ("large-1@b", Tier.LARGE, False),
        ("small-1@a", Tier.SMALL, True),
    ]


def steered(clock: list[float]) -> SloShare:
    return SloShare(low=1, high=12, ttft_slo_s=1.0, itl_slo_s=0.25, clock=lambda: clock[0])


def scheduler(shares: SlotShares, share: SloShare | None) -> Scheduler:
    return Scheduler(shares, slo_share=share)


def test_a_warm_worker_says_how_fast_its_engine_is_and_what_batch_may_hold(
    client: redis.Redis,
) -> None:
    worker = registration(client, "small-1@t", Tier.SMALL)
    clock = [0.0]
    share = steered(clock)
    sched = scheduler(slot_shares(TierConfig(), 16), share)
    worker.track(lambda: 0, sched.snapshot)
    worker.mark_warm(CPU_TIMING)
    (entry,) = live_workers(client)
    assert (entry.engine_first_token_ms, entry.engine_step_ms) == (45.0, 40.0)
    assert entry.interactive_first_token_ms_p50 is None
    assert (entry.batch_under_interactive, entry.interactive_ttft_slo_ms) == (12, 1000.0)
    for _ in range(8):
        sched.interactive_finished(0.2)
    sched.first_token_measured(0.95)  # near the SLO: the share is cut
    worker._write()  # the next heartbeat
    (entry,) = live_workers(client)
    assert entry.interactive_first_token_ms_p50 == 200.0
    assert (entry.batch_under_interactive, entry.batch_share_cuts) == (8, 1)


def test_status_shows_batch_s_share_while_people_wait(client: redis.Redis) -> None:
    fixed = slot_shares(TierConfig(batch_slots_under_interactive=0, batch_min_slots=0), 16)
    cases = (
        ("small-1@steered", slot_shares(TierConfig(), 16), steered([0.0])),
        ("small-2@paused", fixed, None),
    )
    for worker_id, shares, share in cases:
        snapshot = scheduler(shares, share).snapshot()
        worker = registration(client, worker_id, Tier.SMALL)
        worker.track(lambda: 0, lambda snapshot=snapshot: snapshot)
        worker.mark_warm(CPU_TIMING)
    status = render_status(client)
    rows = {line.split()[0]: line for line in status.splitlines() if line.strip()}
    assert "BATCH WHILE PEOPLE WAIT" in status
    assert rows["small-1@steered"].endswith("12 slots (SLO 1000 ms, 0 cuts)")
    assert rows["small-2@paused"].endswith("paused")


def test_a_known_worker_whose_entry_expired_is_left_out(client: redis.Redis) -> None:
    registration(client, "small-1@gone", Tier.SMALL)._write()
    client.delete(worker_key("small-1@gone"))  # as if its heartbeat lapsed
    assert client.sismember(KNOWN_WORKERS_KEY, "small-1@gone")  # for the reaper to clear
    assert live_workers(client) == []


def test_each_heartbeat_rejoins_the_known_workers(client: redis.Redis) -> None:
    worker = registration(client, "small-1@back", Tier.SMALL)
    worker._write()
    # A reaper took it for dead while its entry had lapsed, and cleared its id.
    client.srem(KNOWN_WORKERS_KEY, "small-1@back")
    worker._write()
    assert [w.worker_id for w in live_workers(client)] == ["small-1@back"]
    assert 0 < client.ttl(worker_key("small-1@back")) <= EXPIRY_S


def test_an_unreadable_entry_is_skipped_not_fatal(client: redis.Redis) -> None:
    registration(client, "small-1@ok", Tier.SMALL)._write()
    client.sadd(KNOWN_WORKERS_KEY, "small-2@bad")
    client.hset(worker_key("small-2@bad"), "tier", "not json")
    assert [w.worker_id for w in live_workers(client)] == ["small-1@ok"]


def test_status_flags_a_queue_with_work_and_no_reader(client: redis.Redis) -> None:
    registration(client, "small-1@only", Tier.SMALL).mark_warm(CPU_TIMING)
    client.rpush("llm.small.batch", b"x")
    client.rpush("llm.large.batch", b"x", b"y")
    rows = {line.split()[0]: line for line in render_status(client).splitlines() if line.strip()}
    assert rows["llm.large.batch"].endswith("2  ! no worker reads this queue")
    assert rows["llm.small.batch"].endswith(" 1")
