from __future__ import annotations

import pytest

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
    }
