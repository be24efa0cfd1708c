"""The worker's transport announces each job message the moment it is read, before
Celery sees it; malformed entries are dropped unannounced (real kombu on real Redis)."""

from __future__ import annotations

from typing import Any

import pytest
from kombu import Consumer

from producer.client import Client
from schemas.queues import DROPPED_MESSAGES_KEY, Priority, Tier, held_key, queue_name
from schemas.settings import Settings
from tests.integration.test_recovery import REQUEST
from workers.app import make_app
from workers.envelope import ReceivedJobMessage
from workers.transport import job_message_received

pytestmark = pytest.mark.integration

QUEUE = queue_name(Tier.SMALL, Priority.INTERACTIVE)
WORKER = "small-1@receipt"


def test_a_job_message_is_announced_before_celery_gets_it_and_before_its_records(
    integration_settings: Settings,
) -> None:
    order: list[str] = []
    announced: list[ReceivedJobMessage] = []

    def on_read(message: ReceivedJobMessage | None = None, **_: Any) -> None:
        assert message is not None
        announced.append(message)
        order.append(f"announced, {client.redis.hlen(held_key(WORKER))} records")

    def on_message(_body: Any, message: Any) -> None:
        order.append("celery")
        message.ack()

    app = make_app(integration_settings, worker_id=WORKER)
    job_message_received.connect(on_read, weak=False)
    try:
        with Client(integration_settings) as client, app.connection_for_read() as connection:
            handle = client.submit(REQUEST)
            queue = app.amqp.queues[QUEUE]
            with Consumer(connection, queues=[queue], callbacks=[on_message], accept=["json"]):
                connection.drain_events(timeout=5)
    finally:
        job_message_received.disconnect(on_read)
    assert order == ["announced, 0 records", "celery"]
    (message,) = announced
    assert message.job_id == handle.job_id
    assert message.eta is None
    assert message.kwargs["priority"] == "interactive"
    (sent,) = REQUEST["messages"]
    assert message.kwargs["request"]["messages"] == [sent]


def test_a_malformed_entry_is_dropped_unannounced(integration_settings: Settings) -> None:
    announced: list[Any] = []

    def on_read(**named: Any) -> None:
        announced.append(named)

    app = make_app(integration_settings, worker_id=WORKER)
    job_message_received.connect(on_read, weak=False)
    try:
        with Client(integration_settings) as client, app.connection_for_read() as connection:
            client.redis.lpush(QUEUE, '{"body": "not base64", "headers": {}}')
            client.submit(REQUEST)  # a good one behind it, so the drain returns
            queue = app.amqp.queues[QUEUE]
            acked = lambda _body, message: message.ack()  # noqa: E731
            with Consumer(connection, queues=[queue], callbacks=[acked], accept=["json"]):
                connection.drain_events(timeout=5)
                connection.drain_events(timeout=5)
            dropped = int(client.redis.get(DROPPED_MESSAGES_KEY) or 0)
    finally:
        job_message_received.disconnect(on_read)
    assert dropped == 1
    assert len(announced) == 1
