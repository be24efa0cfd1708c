"""``AsyncClient.submit(follow=True)``: subscribed before the job is queued, in real
Redis and PostgreSQL, with the worker's own job runner on a scripted engine."""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import TypeVar

import pytest

from producer.aio import AsyncClient
from schemas.errors import QueueFull
from schemas.queues import Priority, Tier, queue_name
from schemas.settings import Settings, TierConfig
from tests.integration.test_runner import ScriptedEngine, runtime_for
from tests.integration.test_submit import job_rows, queued_messages
from workers.job_runner import run_job

pytestmark = pytest.mark.integration


def test_a_followed_job_streams_every_event_without_reading_the_log(
    integration_settings: Settings,
) -> None:
    runtime = runtime_for(integration_settings, ScriptedEngine(["fol", "low", "ed"]))

    async def scenario(client: AsyncClient) -> tuple[list[str], str]:
        handle = await client.submit("hi", tier="small", follow=True)
        assert handle.subscription is not None

        async def no_log_read(*_args: object) -> list[bytes]:
            raise AssertionError("the log was read: the subscription came too late")

        client.redis.lrange = no_log_read  # type: ignore[method-assign]
        # The whole job runs before the reading starts: every event waits on the
        # subscription, which Redis confirmed before the job was queued.
        await asyncio.to_thread(run_job, runtime, handle.job_id)
        chunks = [chunk async for chunk in handle.stream(timeout=10)]
        return chunks, (await handle.result(timeout=10)).text

    chunks, text = asyncio.run(_with_client(integration_settings, scenario))
    assert chunks == ["fol", "low", "ed"]
    assert text == "followed"


def test_a_repeated_idempotency_key_follows_the_job_it_names(
    integration_settings: Settings,
) -> None:
    runtime = runtime_for(integration_settings, ScriptedEngine(["once"]))

    async def scenario(client: AsyncClient) -> tuple[str, str, bool, str]:
        first = await client.submit("hi", tier="small", idempotency_key="k", follow=True)
        again = await client.submit("hi", tier="small", idempotency_key="k", follow=True)
        await asyncio.to_thread(run_job, runtime, first.job_id)
        text = (await again.result(timeout=10)).text  # read from the log, as any reader
        await first.close()
        return first.job_id, again.job_id, again.subscription is None, text

    first_id, again_id, nothing_held, text = asyncio.run(
        _with_client(integration_settings, scenario)
    )
    assert again_id == first_id
    assert nothing_held
    assert text == "once"
    # One message for the two submits: the repeat queued nothing.
    queue = queue_name(Tier.SMALL, Priority.INTERACTIVE)
    assert len(queued_messages(integration_settings)[queue]) == 1


def test_a_full_queue_refuses_a_followed_submit_and_leaves_no_row(
    integration_settings: Settings,
) -> None:
    tiers = {tier: TierConfig(max_queue_depth={Priority.INTERACTIVE: 0}) for tier in Tier}
    settings = integration_settings.model_copy(update={"tiers": tiers})

    async def scenario(client: AsyncClient) -> int:
        in_use_before = _connections_in_use(client)
        with pytest.raises(QueueFull, match="limit 0"):
            await client.submit("hi", tier="small", follow=True)
        return _connections_in_use(client) - in_use_before

    assert asyncio.run(_with_client(settings, scenario)) == 0  # the subscription was closed
    assert job_rows(settings) == []


def test_closing_an_unread_handle_gives_its_connection_back(
    integration_settings: Settings,
) -> None:
    async def scenario(client: AsyncClient) -> tuple[int, int]:
        in_use_before = _connections_in_use(client)
        handle = await client.submit("hi", tier="small", follow=True)
        held = _connections_in_use(client) - in_use_before
        await handle.close()
        await handle.close()  # twice is harmless
        return held, _connections_in_use(client) - in_use_before

    held, after = asyncio.run(_with_client(integration_settings, scenario))
    assert (held, after) == (1, 0)


T = TypeVar("T")


async def _with_client(settings: Settings, scenario: Callable[[AsyncClient], Awaitable[T]]) -> T:
    async with AsyncClient(settings) as client:
        return await scenario(client)


def _connections_in_use(client: AsyncClient) -> int:
    return len(client.redis.connection_pool._in_use_connections)  # type: ignore[attr-defined]
