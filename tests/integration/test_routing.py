"""Auto routing with a freshly trained router, against real Redis queue depths."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
import redis

from producer.client import Client
from producer.router.route import Router
from producer.router.training import train_router
from schemas.queues import (
    ROUTING_COUNTS_KEY,
    SERVICE_MS_KEY,
    Priority,
    Tier,
    queue_name,
)
from schemas.registry import WorkerEntry, write_entry
from schemas.requests import GenerationRequest
from schemas.settings import Settings, TierConfig
from tests.integration.test_submit import job_rows

pytestmark = pytest.mark.integration

HARD = "Write a Python function that merges overlapping intervals and explain its complexity."
EASY = "what time do you open on sunday"


@pytest.fixture(scope="module")
def router_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    folder = tmp_path_factory.mktemp("router")
    train_router(Settings(router_dir=folder))
    return folder


@pytest.fixture
def settings(integration_settings: Settings, router_dir: Path) -> Iterator[Settings]:
    yield integration_settings.model_copy(update={"router_dir": router_dir})


def test_training_is_reproducible_and_meets_the_bar(router_dir: Path) -> None:
    first = sorted(p.name for p in router_dir.glob("router-*.npz"))
    path, metadata = train_router(Settings(router_dir=router_dir))
    assert [path.name] == first  # same data and seed: the same artifact, byte for byte
    validation = metadata["validation"]
    assert validation["accuracy"] >= 0.85
    assert validation["recall"]["large"] >= 0.95
    assert len(metadata["data_hash"]) == 16


def test_auto_routing_is_recorded_on_the_job_row(settings: Settings) -> None:
    with Client(settings) as client:
        client.submit(HARD, priority="batch")
        client.submit(EASY, priority="batch")
    rows = {row.request["messages"][0]["content"]: row for row in job_rows(settings)}
    hard, easy = rows[HARD], rows[EASY]
    assert hard.tier == "large" and hard.routing["requested"] == "auto"
    assert easy.tier == "small" and easy.routing["confidence"] > 0.5
    assert easy.routing["reason"].startswith("classified small")
    counts = redis.Redis.from_url(settings.broker_url).hgetall(ROUTING_COUNTS_KEY)
    assert sum(int(v) for v in counts.values()) == 2


def test_an_explicit_tier_always_wins(settings: Settings) -> None:
    decision = Router(settings).route(GenerationRequest.from_text(HARD), requested=Tier.SMALL)
    assert decision.tier is Tier.SMALL
    assert decision.reason == "explicit tier"


@pytest.mark.parametrize("text", ["xq zzv plorf wuggle snarp blen", "Wo ist meine Bestellung?"])
def test_gibberish_and_other_languages_are_escalated(settings: Settings, text: str) -> None:
    decision = Router(settings).route(GenerationRequest.from_text(text), requested="auto")
    assert decision.tier is not Tier.SMALL
    assert "upward" in decision.reason or "escalated" in decision.reason


def pretend_worker(client: redis.Redis, tier: Tier, slots: int) -> None:
    entry = WorkerEntry(worker_id=f"{tier.value}-1@test", tier=tier, warm=True, concurrency=slots)
    write_entry(client, entry, expiry_s=60)


def test_an_overloaded_tier_steps_up_to_a_neighbour_with_headroom(settings: Settings) -> None:
    client = redis.Redis.from_url(settings.broker_url)
    pretend_worker(client, Tier.SMALL, 1)
    pretend_worker(client, Tier.MEDIUM, 4)
    client.hset(SERVICE_MS_KEY, mapping={"small": 500, "medium": 800})
    # 10 jobs x 500 ms on one slot: ~5 s of waiting, over the 2 s SLO.
    client.rpush(queue_name(Tier.SMALL, Priority.INTERACTIVE), *[b"x"] * 10)
    router = Router(settings, client)
    decision = router.route(GenerationRequest.from_text(EASY), requested="auto")
    assert decision.tier is Tier.MEDIUM
    assert decision.load_adjusted
    assert "small queue wait ~5000 ms over its 2000 ms SLO" in decision.reason
    # Batch work is not moved: nobody waits for it.
    batch = router.route(
        GenerationRequest.from_text(EASY), requested="auto", priority=Priority.BATCH
    )
    assert batch.tier is Tier.SMALL


def test_stepping_down_needs_permission(settings: Settings) -> None:
    client = redis.Redis.from_url(settings.broker_url)
    pretend_worker(client, Tier.LARGE, 1)
    pretend_worker(client, Tier.MEDIUM, 4)
    client.hset(SERVICE_MS_KEY, mapping={"large": 3000, "medium": 800})
    client.rpush(queue_name(Tier.LARGE, Priority.INTERACTIVE), *[b"x"] * 5)
    request = GenerationRequest.from_text(HARD)
    assert Router(settings, client).route(request, requested="auto").tier is Tier.LARGE
    permissive = {**settings.tiers, Tier.LARGE: TierConfig(allow_step_down=True)}
    allowed = settings.model_copy(update={"tiers": permissive})
    decision = Router(allowed, client).route(request, requested="auto")
    assert decision.tier is Tier.MEDIUM
    assert decision.load_adjusted


def test_auto_takes_the_nearest_served_tier_when_its_choice_has_no_worker(
    settings: Settings,
) -> None:
    client = redis.Redis.from_url(settings.broker_url)
    pretend_worker(client, Tier.SMALL, 16)  # the default install: one small worker
    router = Router(settings, client)
    for priority in Priority:
        decision = router.route(
            GenerationRequest.from_text(HARD), requested="auto", priority=priority
        )
        assert decision.tier is Tier.SMALL, priority
        assert decision.routed_tier is Tier.LARGE
        assert "no worker serves large: the nearest served tier is small" in decision.reason
    counts = {k.decode(): int(v) for k, v in client.hgetall(ROUTING_COUNTS_KEY).items()}
    assert counts == {"small:fallback": 2}


def test_a_served_tier_above_wins_over_one_below(settings: Settings) -> None:
    client = redis.Redis.from_url(settings.broker_url)
    pretend_worker(client, Tier.LARGE, 4)
    decision = Router(settings, client).route(GenerationRequest.from_text(EASY), requested="auto")
    assert (decision.tier, decision.routed_tier) == (Tier.LARGE, Tier.SMALL)


def test_a_tier_that_scales_from_zero_is_served_without_a_worker(settings: Settings) -> None:
    client = redis.Redis.from_url(settings.broker_url)
    pretend_worker(client, Tier.SMALL, 16)
    scaled = {**settings.tiers, Tier.LARGE: TierConfig(scales_from_zero=True)}
    router = Router(settings.model_copy(update={"tiers": scaled}), client)
    decision = router.route(GenerationRequest.from_text(HARD), requested="auto")
    assert (decision.tier, decision.routed_tier) == (Tier.LARGE, Tier.LARGE)


def test_with_no_worker_at_all_auto_keeps_its_choice(settings: Settings) -> None:
    client = redis.Redis.from_url(settings.broker_url)
    decision = Router(settings, client).route(GenerationRequest.from_text(HARD), requested="auto")
    assert decision.tier is Tier.LARGE


def test_the_job_row_and_handle_keep_both_tiers(settings: Settings) -> None:
    pretend_worker(redis.Redis.from_url(settings.broker_url), Tier.SMALL, 16)
    with Client(settings) as client:
        handle = client.submit(HARD, priority="batch")
    assert (handle.tier, handle.routed_tier) == (Tier.SMALL, Tier.LARGE)
    (row,) = job_rows(settings)
    assert row.tier == "small" and row.routing["routed_tier"] == "large"
