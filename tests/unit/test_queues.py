from __future__ import annotations

import pytest
from kombu.connection import Connection

from schemas import queues
from schemas.queues import (
    Priority,
    Tier,
    all_queues,
    celery_config,
    parse_queue_name,
    queue_name,
    tier_queues,
)


def test_queue_names_follow_tier_and_priority() -> None:
    assert queue_name(Tier.SMALL, Priority.INTERACTIVE) == "llm.small.interactive"
    assert queue_name(Tier("large"), Priority("batch")) == "llm.large.batch"


def test_parse_is_the_inverse_of_naming() -> None:
    for name in all_queues():
        assert queue_name(*parse_queue_name(name)) == name


@pytest.mark.parametrize("name", ["llm.huge.batch", "llm.small.urgent", "other.small.batch", "x"])
def test_foreign_queue_names_are_rejected(name: str) -> None:
    with pytest.raises(ValueError):
        parse_queue_name(name)


def test_a_worker_reads_interactive_before_batch() -> None:
    assert tier_queues(Tier.MEDIUM) == ["llm.medium.interactive", "llm.medium.batch"]
    assert len(all_queues()) == len(Tier) * len(Priority)


def test_celery_speaks_json_only_and_reads_queues_in_order() -> None:
    config = celery_config(broker_url="redis://x:1/0", visibility_timeout_s=123)
    assert config["accept_content"] == ["json"]
    assert config["task_serializer"] == "json"
    assert config["worker_prefetch_multiplier"] == 1
    assert config["broker_transport_options"] == {
        "visibility_timeout": 123,
        "queue_order_strategy": "priority",
        "polling_interval": queues.BRPOP_TIMEOUT_S,
    }


def test_a_worker_polls_its_queues_in_short_brpops() -> None:
    # A resumed queue joins the next BRPOP: kombu must really take the short timeout.
    config = celery_config(broker_url="redis://127.0.0.1:1/0", visibility_timeout_s=60)
    connection = Connection(  # type: ignore[no-untyped-call]
        config["broker_url"], transport_options=config["broker_transport_options"]
    )
    assert connection.transport.brpop_timeout == queues.BRPOP_TIMEOUT_S


def test_redis_key_names_stay_as_deployments_wrote_them() -> None:
    assert queues.cancel_key("j") == "llmq:job:j:cancel"
    assert queues.event_channel("j") == "llmq:job:j:events"
    assert queues.event_log_key("j") == "llmq:job:j:log"
    assert queues.worker_key("w") == "llmq:worker:w"
    assert queues.held_key("w") == "llmq:held:w"
    assert queues.queues_kept_key(Tier.SMALL) == "llmq:queues-kept:small"
    assert queues.rate_limit_key("k") == "llmq:ratelimit:k"
    assert queues.auth_failure_key("1.2.3.4") == "llmq:authfail:1.2.3.4"
    assert queues.open_streams_key("k") == "llmq:streams:k"
    assert queues.CANCEL_CHANNEL == "llmq:cancel"
    assert queues.KNOWN_WORKERS_KEY == "llmq:workers"
    assert queues.SERVICE_MS_KEY == "llmq:stats:service_ms"
    assert queues.ROUTING_COUNTS_KEY == "llmq:stats:routing"
    assert queues.DROPPED_MESSAGES_KEY == "llmq:stats:dropped_messages"
    assert queues.LOST_MESSAGE_SWEEP_LOCK_KEY == "llmq:lock:lost-message-sweep"
