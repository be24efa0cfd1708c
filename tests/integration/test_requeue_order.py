"""A job that gave way goes back to the front of its queue; new jobs join the back.

Real Redis through the worker's own Celery app and kombu transport: the order is what
the next reads of the queue return.
"""

from __future__ import annotations

import pytest

from schemas.queues import Priority, Tier, queue_name
from schemas.settings import Settings
from tests.integration.test_held_messages import worker_channel
from workers.app import make_app
from workers.consume import job_sender

pytestmark = pytest.mark.integration

TIER, PRIORITY = Tier.SMALL, Priority.BATCH


def read_job_ids(settings: Settings, count: int) -> list[str]:
    with worker_channel(settings, "small-1@reader") as channel:
        ids = []
        for _ in range(count):
            message = channel.basic_get(queue_name(TIER, PRIORITY), no_ack=True)
            assert message is not None
            ids.append(message.headers["id"])
        assert channel.basic_get(queue_name(TIER, PRIORITY), no_ack=True) is None
        return ids


def test_a_resent_job_is_read_before_the_jobs_that_waited_behind_it(
    integration_settings: Settings,
) -> None:
    app = make_app(integration_settings, worker_id="small-1@sender")
    to_back, to_front = job_sender(app), job_sender(app, to_front=True)
    to_back("job-waiting-1", TIER, PRIORITY)
    to_back("job-waiting-2", TIER, PRIORITY)
    to_front("job-gave-way", TIER, PRIORITY)
    to_back("job-new", TIER, PRIORITY)

    assert read_job_ids(integration_settings, 4) == [
        "job-gave-way",
        "job-waiting-1",
        "job-waiting-2",
        "job-new",
    ]
