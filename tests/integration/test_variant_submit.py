"""A variant is reached only by its name, on its own queues, against real Redis and SQL."""

from __future__ import annotations

import json

import pytest
import redis

from producer.client import Client
from schemas.errors import InvalidRequest
from schemas.queues import Tier
from schemas.settings import Settings
from workers.transport import job_ids_in_broker

pytestmark = pytest.mark.integration


@pytest.fixture
def settings(integration_settings: Settings) -> Settings:
    return integration_settings.model_copy(
        update={
            "tiers": {**integration_settings.tiers, Tier("small@bf16"): Settings().tier(Tier.SMALL)}
        }
    )


def test_a_variant_has_its_own_queue(settings: Settings) -> None:
    broker = redis.Redis.from_url(settings.broker_url)
    with Client(settings) as client:
        handle = client.submit("Where is my order?", tier="small@bf16")
        assert handle.tier == "small@bf16"
        assert client.job(handle.job_id).tier == "small@bf16"
        auto = client.submit("Where is my order?")  # auto never picks a variant
        assert "@" not in str(client.job(auto.job_id).tier)
        depths = {(str(d.tier), str(d.priority)): d.depth for d in client.queue_depths()}
        assert depths[("small@bf16", "interactive")] == 1  # llmq status shows variants
    assert broker.llen("llm.small@bf16.interactive") == 1
    (raw,) = broker.lrange("llm.small@bf16.interactive", 0, -1)
    assert json.loads(raw)["properties"]["delivery_info"]["routing_key"] == (
        "llm.small@bf16.interactive"
    )
    assert handle.job_id in job_ids_in_broker(broker)  # the lost-message sweep sees it
    assert auto.job_id in job_ids_in_broker(broker)


def test_an_unconfigured_variant_is_refused(settings: Settings) -> None:
    with Client(settings) as client, pytest.raises(InvalidRequest, match="no tier small@nope"):
        client.submit("hello", tier="small@nope")
    with Client(settings) as client, pytest.raises(InvalidRequest):
        client.submit("hello", tier="small@")


def test_the_gateway_serves_a_variant_by_name(settings: Settings) -> None:
    import httpx

    from tests.gateway_server import running_gateway

    with running_gateway(settings, require_keys=False) as url, httpx.Client(base_url=url) as http:
        models = [m["id"] for m in http.get("/v1/models").json()["data"]]
        assert models[-2:] == ["small@bf16", "embed"] and "auto" in models
        unknown = http.post(
            "/v1/chat/completions",
            json={"model": "small@nope", "messages": [{"role": "user", "content": "hi"}]},
        )
        assert unknown.status_code == 404, unknown.text
        assert "small@bf16" in unknown.json()["error"]["message"]
        waiting = http.post(
            "/v1/chat/completions",
            json={"model": "small@bf16", "messages": [{"role": "user", "content": "hi"}]},
        )
    # Nobody serves the variant here, and the gateway says so for that variant.
    assert waiting.status_code == 503, waiting.text
    assert "small@bf16" in waiting.json()["error"]["message"]
