"""The gateway over real Redis and PostgreSQL: auth, errors, ownership, SSE resume.

No worker runs here; jobs are run with the scripted engine where a stream is needed.
The official OpenAI SDK against a real worker is in tests/e2e/test_gateway_e2e.py.
"""

from __future__ import annotations

import json
import time
from collections.abc import Iterator

import httpx
import pytest

from producer.client import Client
from producer.gateway.keys import create_key
from schemas.db import make_engine, make_sessions
from schemas.queues import Priority, Tier
from schemas.settings import Settings, TierConfig
from tests.gateway_server import running_gateway
from tests.integration.test_runner import ScriptedEngine, runtime_for
from workers.job_runner import run_job

pytestmark = pytest.mark.integration

CHAT = "/v1/chat/completions"
HELLO = {"model": "small", "messages": [{"role": "user", "content": "hello"}]}


def new_key(settings: Settings, name: str, rate_limit: int = 600) -> str:
    engine = make_engine(settings.database_url)
    _identity, secret = create_key(make_sessions(engine), name, rate_limit_per_min=rate_limit)
    engine.dispose()
    return secret


def auth(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def gateway(integration_settings: Settings) -> Iterator[httpx.Client]:
    with running_gateway(integration_settings) as url, httpx.Client(base_url=url) as http:
        yield http


def assert_openai_error(response: httpx.Response, status: int, code: str) -> dict[str, object]:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"]
    return error  # type: ignore[no-any-return]


def test_calls_without_a_valid_key_are_refused(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    assert_openai_error(gateway.post(CHAT, json=HELLO), 401, "invalid_api_key")
    bad = gateway.post(CHAT, json=HELLO, headers=auth("llmq-not-a-key"))
    assert_openai_error(bad, 401, "invalid_api_key")
    assert gateway.get("/v1/models", headers=auth("nope")).status_code == 401


def test_models_lists_auto_the_tiers_and_the_embedding_model(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    response = gateway.get("/v1/models", headers=auth(new_key(integration_settings, "a")))
    assert [m["id"] for m in response.json()["data"]] == [
        "auto",
        "small",
        "medium",
        "large",
        "embed",
    ]


@pytest.mark.parametrize(
    ("body", "status", "code"),
    [
        ({**HELLO, "model": "gpt-9"}, 404, "model_not_found"),
        ({**HELLO, "messages": []}, 400, "invalid_request"),
        ({**HELLO, "messages": [{"role": "user", "content": " "}]}, 400, "invalid_request"),
        ({**HELLO, "max_tokens": 5000}, 413, "context_length_exceeded"),
        ({**HELLO, "priority": "urgent"}, 400, "invalid_request"),
        (HELLO, 503, "no_warm_worker"),
    ],
)
def test_bad_calls_get_the_right_status(
    gateway: httpx.Client,
    integration_settings: Settings,
    body: dict[str, object],
    status: int,
    code: str,
) -> None:
    response = gateway.post(CHAT, json=body, headers=auth(new_key(integration_settings, "a")))
    assert_openai_error(response, status, code)


def test_a_body_that_is_not_json_is_a_400(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    response = gateway.post(
        CHAT,
        content=b"{not json",
        headers={**auth(new_key(integration_settings, "a")), "content-type": "application/json"},
    )
    assert_openai_error(response, 400, "invalid_request")


def test_a_full_queue_is_a_429_with_retry_after(integration_settings: Settings) -> None:
    tier = TierConfig(max_queue_depth={Priority.INTERACTIVE: 10, Priority.BATCH: 0})
    settings = integration_settings.model_copy(
        update={"tiers": {**integration_settings.tiers, Tier.SMALL: tier}}
    )
    with running_gateway(settings) as url:
        response = httpx.post(
            url + CHAT,
            json={**HELLO, "priority": "batch"},
            headers=auth(new_key(settings, "a")),
        )
    assert_openai_error(response, 429, "queue_full")
    assert int(response.headers["retry-after"]) >= 1


def test_a_key_over_its_rate_limit_gets_429(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    headers = auth(new_key(integration_settings, "slow", rate_limit=2))
    assert gateway.get("/v1/models", headers=headers).status_code == 200
    assert gateway.get("/v1/models", headers=headers).status_code == 200
    limited = gateway.get("/v1/models", headers=headers)
    assert_openai_error(limited, 429, "rate_limit_exceeded")
    assert 1 <= int(limited.headers["retry-after"]) <= 60


def stream_lines(response: httpx.Response) -> list[tuple[str | None, str]]:
    """(event id, data) of every SSE event."""
    events, event_id = [], None
    for line in response.iter_lines():
        if line.startswith("id: "):
            event_id = line[4:]
        elif line.startswith("data: "):
            events.append((event_id, line[6:]))
            event_id = None
    return events


def test_jobs_are_private_and_streams_resume_from_last_event_id(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    owner, stranger = new_key(integration_settings, "owner"), new_key(integration_settings, "x")
    body = {**HELLO, "stream": True, "priority": "batch"}
    engine = ScriptedEngine(["one ", "two ", "three"])
    with gateway.stream("POST", CHAT, json=body, headers=auth(owner)) as response:
        assert response.status_code == 200
        lines = response.iter_lines()
        job_id = None
        # The job is queued; run it with the scripted engine while the stream is open.
        from sqlalchemy import create_engine, select
        from sqlalchemy.orm import Session

        from schemas.tables import Job

        db = create_engine(integration_settings.database_url)
        with Session(db) as session:
            job_id = session.scalars(select(Job.id)).one()
        db.dispose()
        run_job(runtime_for(integration_settings, engine), job_id)
        first_events = [line for line in lines if line.startswith("data: ")]
    chunks = [json.loads(d[6:]) for d in first_events if d != "data: [DONE]"]
    assert (
        "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
        == "one two three"
    )
    assert chunks[0]["choices"][0]["delta"]["role"] == "assistant"
    assert first_events[-1] == "data: [DONE]"

    # Reconnect after event 1: only what came after it.
    headers = {**auth(owner), "Last-Event-ID": f"{job_id}.1"}
    with gateway.stream("POST", CHAT, json=body, headers=headers) as response:
        resumed = stream_lines(response)
    assert [event_id for event_id, _ in resumed[:-1]] == [f"{job_id}.2", f"{job_id}.3"]
    assert json.loads(resumed[0][1])["choices"][0]["delta"]["content"] == "three"

    mine = gateway.get(f"/v1/jobs/{job_id}", headers=auth(owner))
    assert mine.status_code == 200
    assert mine.json()["status"] == "done"
    assert mine.json()["routing"]["tier"] == "small"
    assert_openai_error(gateway.get(f"/v1/jobs/{job_id}", headers=auth(stranger)), 404, "not_found")
    stolen = gateway.post(
        CHAT, json=body, headers={**auth(stranger), "Last-Event-ID": f"{job_id}.0"}
    )
    assert_openai_error(stolen, 404, "not_found")


def test_health_readiness_and_metrics(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    assert gateway.get("/healthz").json() == {"status": "ok"}
    assert gateway.get("/readyz").json() == {"status": "ready"}
    with Client(integration_settings) as client:
        for _ in range(3):
            client.submit("hello", tier="small", priority="batch")
    settings = integration_settings.model_copy(update={"metrics_refresh_s": 0.1})
    headers = auth(new_key(settings, "prometheus"))
    with running_gateway(settings) as url, httpx.Client(base_url=url) as http:
        # Cluster series are read off the event loop: the first scrapes may predate them.
        deadline = time.monotonic() + 10
        while True:
            text = http.get("/metrics", headers=headers).text
            series = {
                line.split(" ")[0]: float(line.split(" ")[1])
                for line in text.splitlines()
                if line.startswith("llmq_")
            }
            if "llmq_dead_letter_jobs" in series or time.monotonic() > deadline:
                break
            time.sleep(0.05)
    assert "llmq_gateway_requests" in text
    small = 'priority="{0}",queue="llm.small.{0}",tier="small"'
    assert series[f"llmq_queue_depth{{{small.format('interactive')}}}"] == 0
    assert series[f"llmq_queue_depth{{{small.format('batch')}}}"] == 3
    assert series[f"llmq_queue_oldest_age_seconds{{{small.format('batch')}}}"] > 0
    assert series["llmq_redis_up"] == 1
    assert series['llmq_workers{state="warm",tier="small"}'] == 0
    assert series["llmq_dead_letter_jobs"] == 0


def test_only_the_owner_can_cancel_a_job(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    engine = make_engine(integration_settings.database_url)
    owner, secret = create_key(make_sessions(engine), "owner", rate_limit_per_min=600)
    engine.dispose()
    with Client(integration_settings) as client:
        handle = client.submit("hello", tier="small", priority="batch", owner=owner.id)
    path = f"/v1/jobs/{handle.job_id}/cancel"
    stranger = auth(new_key(integration_settings, "x"))
    assert_openai_error(gateway.post(path, headers=stranger), 404, "not_found")
    cancelled = gateway.post(path, headers=auth(secret))
    assert cancelled.status_code == 200, cancelled.text
    assert cancelled.json()["status"] == "cancelled"
    assert cancelled.json()["error"] == "cancelled by its client"


def job_owners(settings: Settings) -> list[str | None]:
    from sqlalchemy import select

    from schemas.tables import Job

    engine = make_engine(settings.database_url)
    with make_sessions(engine)() as session:
        owners = list(session.scalars(select(Job.owner).order_by(Job.created_at)))
    engine.dispose()
    return owners


def test_idempotency_keys_belong_to_the_api_key(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    engine = make_engine(integration_settings.database_url)
    a, secret_a = create_key(make_sessions(engine), "a", rate_limit_per_min=600)
    b, secret_b = create_key(make_sessions(engine), "b", rate_limit_per_min=600)
    engine.dispose()
    body = {**HELLO, "stream": True, "priority": "batch"}

    def post(secret: str, json_body: dict[str, object]) -> int:
        headers = {**auth(secret), "Idempotency-Key": "order-1"}
        with gateway.stream("POST", CHAT, json=json_body, headers=headers) as response:
            if response.status_code != 200:
                response.read()
                assert_openai_error(response, 409, "idempotency_conflict")
            return response.status_code

    assert post(secret_a, body) == 200
    assert post(secret_a, body) == 200  # a replay: the same job
    assert job_owners(integration_settings) == [a.id]
    changed = {**body, "messages": [{"role": "user", "content": "something else"}]}
    assert post(secret_a, changed) == 409
    assert post(secret_b, body) == 200  # another key's job, not a's
    assert job_owners(integration_settings) == [a.id, b.id]


def test_a_path_or_method_no_route_serves_is_an_openai_error_naming_it(
    gateway: httpx.Client, integration_settings: Settings
) -> None:
    headers = auth(new_key(integration_settings, "caller"))
    body = {"model": "small", "input": "hello"}
    error = assert_openai_error(
        gateway.post("/v1/moderations", json=body, headers=headers), 404, "not_found"
    )
    assert "POST /v1/moderations is not served" in str(error["message"])
    assert "/v1/chat/completions" in str(error["message"])
    error = assert_openai_error(gateway.get(CHAT, headers=headers), 405, "method_not_allowed")
    assert f"GET {CHAT}" in str(error["message"])
    # The front door comes first: without a key, an unknown /v1 path is a 401.
    assert_openai_error(gateway.post("/v1/moderations", json=body), 401, "invalid_api_key")
