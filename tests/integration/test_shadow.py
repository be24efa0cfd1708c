"""Live shadow against real Redis and SQL: the share is held, sent once, and scored."""

from __future__ import annotations

import random
import uuid

import pytest
import redis
from sqlalchemy import select, update

from producer.client import Client
from producer.quality.shadow import SHADOW_OWNER, in_share, live_report, shadow_pass
from schemas.db import make_engine, make_sessions
from schemas.errors import InvalidRequest
from schemas.queues import Tier
from schemas.settings import Settings
from schemas.tables import Job

pytestmark = pytest.mark.integration

VARIANT = Tier("small@bf16")


@pytest.fixture
def settings(integration_settings: Settings) -> Settings:
    variant = Settings().tier(Tier.SMALL).model_copy(update={"dtype": "bfloat16"})
    return integration_settings.model_copy(
        update={"tiers": {**integration_settings.tiers, VARIANT: variant}}
    )


def test_the_share_is_shadowed_once_and_scored(settings: Settings) -> None:
    sessions = make_sessions(make_engine(settings.database_url))
    with Client(settings) as client:
        # Seeded ids: which jobs fall in the share is a hash of the id, so random ids
        # would put the count outside any tolerance now and then.
        seeded = random.Random(7)
        ids = [
            client.submit(
                f"Where is order {i}?",
                tier="small",
                job_id=uuid.UUID(int=seeded.getrandbits(128), version=4).hex,
            ).job_id
            for i in range(200)
        ]
        with sessions.begin() as session:
            session.execute(
                update(Job).where(Job.id.in_(ids)).values(status="done", output_text="On its way.")
            )
        sent = shadow_pass(client, sessions, VARIANT, share=0.25)
        assert sent == sum(in_share(job_id, 0.25) for job_id in ids)
        assert 30 <= sent <= 70  # 25% of 200 within tolerance
        assert shadow_pass(client, sessions, VARIANT, share=0.25) == 0  # never twice
        with pytest.raises(InvalidRequest, match="not a variant"):
            shadow_pass(client, sessions, Tier.SMALL, share=0.25)
    with sessions() as session:
        shadows = session.scalars(select(Job).where(Job.owner == SHADOW_OWNER)).all()
        assert len(shadows) == sent
        assert {(j.tier, j.priority) for j in shadows} == {("small@bf16", "batch")}
        assert {j.idempotency_key for j in shadows} <= set(ids)
        shadow_ids = [j.id for j in shadows]
    broker = redis.Redis.from_url(settings.broker_url)
    assert broker.llen("llm.small@bf16.batch") == sent
    report = live_report(sessions, VARIANT)
    assert (report.pairs, report.pending) == (0, sent)
    # Half the shadows answer as the primary did, half differently.
    with sessions.begin() as session:
        for index, job_id in enumerate(shadow_ids):
            text = "On its way." if index % 2 else "No idea."
            session.execute(
                update(Job).where(Job.id == job_id).values(status="done", output_text=text)
            )
    report = live_report(sessions, VARIANT, similarity_of=lambda a, b: 1.0 if a == b else 0.2)
    assert report.pairs == sent and report.pending == 0
    assert report.agreement == pytest.approx((sent // 2) / sent, abs=0.01)
    assert report.gate.verdict == "fail"


def test_in_share_is_stable_and_proportional() -> None:
    ids = [f"job-{i}" for i in range(20_000)]
    for share in (0.01, 0.1, 0.5):
        chosen = sum(in_share(job_id, share) for job_id in ids)
        assert abs(chosen / len(ids) - share) < 0.01
    assert in_share("job-1", 0.5) == in_share("job-1", 0.5)
    assert all(in_share(job_id, 1.0) for job_id in ids[:100])


def test_shadows_of_two_tenants_conversations_join_no_conversation(settings: Settings) -> None:
    sessions = make_sessions(make_engine(settings.database_url))
    with Client(settings) as client:
        ids = [
            client.submit(
                {
                    "messages": [{"role": "user", "content": f"Hi from {owner}"}],
                    "conversation_id": "1",
                },
                tier="small",
                owner=owner,
            ).job_id
            for owner in ("tenant-a", "tenant-b")
        ]
        with sessions.begin() as session:
            session.execute(update(Job).where(Job.id.in_(ids)).values(status="done"))
        assert shadow_pass(client, sessions, VARIANT, share=1.0) == 2
    with sessions() as session:
        shadows = session.scalars(select(Job).where(Job.owner == SHADOW_OWNER)).all()
    assert len(shadows) == 2
    # The same messages, in no conversation: nothing is recorded under the shadow owner.
    assert [job.request.get("conversation_id") for job in shadows] == [None, None]
    assert sorted(job.request["messages"][0]["content"] for job in shadows) == [
        "Hi from tenant-a",
        "Hi from tenant-b",
    ]
