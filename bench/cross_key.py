"""Cross-key access: key B reads, resumes, cancels and idempotency-collides with key A's
jobs through the gateway, and every attempt that saw or touched them is counted.
"""

from __future__ import annotations

import contextlib
import uuid
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import select

from bench.http_cases import CHAT
from producer.client import Client
from producer.gateway.keys import authenticate
from schemas.errors import LlmqError
from schemas.jobs import JobStatus
from schemas.tables import Job


@dataclass
class CrossKeyReport:
    """Key B's attempts on key A's jobs; ``cross_key_reads`` (must be 0) succeeded."""

    cross_key_attempts: int = 0
    cross_key_reads: int = 0
    failures: list[str] = field(default_factory=list)

    def attempt(self, succeeded: bool, what: str) -> None:
        self.cross_key_attempts += 1
        if succeeded:
            self.cross_key_reads += 1
            self.failures.append(what)


def cross_key_probe(
    base_url: str,
    key_a: str,
    key_b: str,
    *,
    client: Client,
    timeout_s: float = 5.0,
    stream_read_s: float = 1.0,
) -> CrossKeyReport:
    """Key B tries to read, resume, cancel and idempotency-collide with key A's jobs.

    Key A gets three batch jobs, each with its own ``Idempotency-Key``: one queued
    through the gateway (a streamed request, since no worker answers), and two
    submitted through ``client`` as key A's (``owner``), one of them cancelled so that
    its stream replays at once. For each, key B asks for its status (and variants of
    its id), resumes its stream with ``Last-Event-ID`` (streamed or not), cancels it,
    and sends A's request (first two) or another request (third) with A's
    ``Idempotency-Key``. An attempt succeeded if B got a 2xx, or no answer in time
    (it got past the owner check), for A's job; saw A's job id in an answer; changed
    A's job; got A's job for A's key instead of one of its own; or was told (409)
    that A used the key. Raises ``ValueError`` if a key is not valid and
    ``RuntimeError`` if key A cannot submit. Every job made here is cancelled before
    returning; needs no worker (and none should be serving the ``small`` tier).
    """
    report = CrossKeyReport()
    identity_a = authenticate(client.sessions, key_a)
    identity_b = authenticate(client.sessions, key_b)
    if identity_a is None or identity_b is None:
        raise ValueError("both keys must be valid API keys")
    tag = uuid.uuid4().hex[:12]
    body: dict[str, Any] = {
        "model": "small",
        "messages": [{"role": "user", "content": f"cross-key probe {tag}"}],
        "priority": "batch",
        "stream": True,
    }
    made: list[str] = []
    timeout = httpx.Timeout(timeout_s, read=stream_read_s)
    # Redirects are followed: a 307 to another path is not an answer about A's job.
    with httpx.Client(base_url=base_url, timeout=timeout, follow_redirects=True) as http:
        queued_key = f"probe-queued-{tag}"
        status, _ids = _post_stream(http, key_a, body, {"Idempotency-Key": queued_key})
        if status != 200:
            raise RuntimeError(f"key A could not submit through the gateway: HTTP {status}")
        queued = _job_by_key(client, identity_a.id, queued_key)
        if queued is None:
            raise RuntimeError("key A's job is not in the job table")
        made.append(queued)
        done_key, other_key = f"probe-done-{tag}", f"probe-other-{tag}"
        text = body["messages"][0]["content"]
        done = client.submit(
            text, tier="small", priority="batch", idempotency_key=done_key, owner=identity_a.id
        ).job_id
        made.append(done)
        client.cancel(done)
        other = client.submit(
            text, tier="small", priority="batch", idempotency_key=other_key, owner=identity_a.id
        ).job_id
        made.append(other)
        probes = ((queued, queued_key, True), (done, done_key, True), (other, other_key, False))
        try:
            for job_id, idem_key, same_body in probes:
                _probe_job(
                    http,
                    client,
                    report,
                    job_id=job_id,
                    idem_key=idem_key,
                    same_body=same_body,
                    body=body,
                    key_b=key_b,
                    owner_b=identity_b.id,
                )
                made.extend(_jobs_of(client, identity_b.id))
        finally:
            for job_id in set(made):
                with contextlib.suppress(LlmqError):
                    client.cancel(job_id)
    return report


def _probe_job(
    http: httpx.Client,
    client: Client,
    report: CrossKeyReport,
    *,
    job_id: str,
    idem_key: str,
    same_body: bool,
    body: dict[str, Any],
    key_b: str,
    owner_b: str,
) -> None:
    b = {"Authorization": f"Bearer {key_b}"}
    before = client.status(job_id)
    for variant in (job_id, job_id.upper(), f"{job_id}/", f"{job_id}%20", f"{job_id}?x=1"):
        url = http.base_url.copy_with(raw_path=f"/v1/jobs/{variant}".encode())
        response = http.get(url, headers=b)
        report.attempt(
            _saw(response, job_id), f"GET /v1/jobs/{variant}: HTTP {response.status_code}"
        )
    response = http.post(f"/v1/jobs/{job_id}/cancel", headers=b)
    touched = _saw(response, job_id) or client.status(job_id) != before
    report.attempt(touched, f"cancel: HTTP {response.status_code}, status {client.status(job_id)}")
    for seq in ("0", "1", "5"):
        for stream in (True, False):
            status, ids = _post_stream(
                http, key_b, {**body, "stream": stream}, {"Last-Event-ID": f"{job_id}.{seq}"}
            )
            seen = status < 400 or any(i.startswith(job_id) for i in ids)
            report.attempt(seen, f"resume {job_id}.{seq} (stream={stream}): HTTP {status} {ids}")
    if same_body:
        # The same request with A's idempotency key must make B a job of its own.
        status, ids = _post_stream(http, key_b, body, {"Idempotency-Key": idem_key})
        mine = _job_by_key(client, owner_b, idem_key)
        collided = (
            status == 409
            or any(i.startswith(job_id) for i in ids)
            or (status == 200 and (mine is None or mine == job_id))
        )
        report.attempt(collided, f"idempotency collide: HTTP {status}, B's job {mine}, {ids}")
    else:
        # Another request with A's key: a 409 would tell B that A used the key.
        changed = {**body, "messages": [{"role": "user", "content": f"other {uuid.uuid4().hex}"}]}
        status, ids = _post_stream(http, key_b, changed, {"Idempotency-Key": idem_key})
        leaked = status == 409 or any(i.startswith(job_id) for i in ids)
        report.attempt(leaked, f"idempotency key of A, another body: HTTP {status}, {ids}")
    after = client.status(job_id)
    report.attempt(after != before, f"A's job changed from {before} to {after}")


def _saw(response: httpx.Response, job_id: str) -> bool:
    if response.status_code < 400:
        return True
    # A refusal may name the id B sent; it must say nothing else about A's job.
    return any(word in response.text for word in ('"status"', '"routing"', '"tier"'))


def _post_stream(
    http: httpx.Client, key: str, body: dict[str, Any], headers: dict[str, str]
) -> tuple[int, list[str]]:
    """POST a chat request; its status and the SSE event ids read within the read timeout.

    The status is 0 when no answer came in time: an unstreamed request that got past
    every check and now waits for its job (a refusal comes at once).
    """
    ids: list[str] = []
    all_headers = {"Authorization": f"Bearer {key}", **headers}
    try:
        with http.stream("POST", CHAT, json=body, headers=all_headers) as response:
            try:
                for line in response.iter_lines():
                    if line.startswith("id: "):
                        ids.append(line[4:])
                    elif "job_id" in line or "chatcmpl-" in line:
                        ids.append(line[:200])
            except httpx.ReadTimeout:
                pass  # queued with no worker: nothing streams yet
            return response.status_code, ids
    except httpx.ReadTimeout:
        return 0, ids


def _job_by_key(client: Client, owner: str, idempotency_key: str) -> str | None:
    with client.sessions() as session:
        return session.scalars(
            select(Job.id).where(Job.owner == owner, Job.idempotency_key == idempotency_key)
        ).one_or_none()


def _jobs_of(client: Client, owner: str) -> list[str]:
    with client.sessions() as session:
        rows = session.scalars(
            select(Job.id).where(Job.owner == owner, Job.status == JobStatus.QUEUED.value)
        )
        return list(rows)
