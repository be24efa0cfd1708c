"""``llmq bench abuse``: a steady interactive stream through the gateway while one
client after another attacks it; what each attack cost everybody else.

A warm worker and ``llmq gateway`` (its own process, as deployed) serve one valid key's
streamed chat completions, one after another with a random pause, through every phase:
``idle`` first, then one phase per attack. Each phase reports the stream's first-token
p50/p99 against the idle phase's, the 5xx answers anyone got, the requests of a valid
key that were refused (401, 403 or 429 other than a quota), and the job rows still
``running`` once the phase's work has settled.
"""

from __future__ import annotations

import contextlib
import io
import json
import random
import secrets
import threading
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import httpx
from sqlalchemy import func, select

from bench.gateway import gateway_process
from bench.harness import Rig, bench_rig, counted, rounded, step
from producer.gateway.keys import create_key
from schemas.jobs import JobStatus
from schemas.percentiles import median, percentile
from schemas.queues import Tier
from schemas.settings import Settings
from schemas.tables import Job

PHASES = (
    "idle",
    "metrics_readyz_flood",
    "batch_flood",
    "big_upload",
    "slow_readers",
    "bad_keys",
    "bad_input",
)
"""Every phase, in run order; ``idle`` is the baseline the others are compared with."""
ATTACKS = {
    "idle": "no attack",
    "metrics_readyz_flood": "GET /metrics (with and without a key) and /readyz, 6 threads",
    "batch_flood": "one key's 10 batches on a batch queue held full",
    "big_upload": "one 50,000-line batch file uploaded after another",
    "slow_readers": "40 clients reading /v1/files/{id}/content 1 KiB at a time",
    "bad_keys": "100 bad keys a minute from the valid key's address",
    "bad_input": "NUL in content, ids and a file line; bodies past LLMQ_MAX_BODY_BYTES",
}
MIN_SAMPLES = 100
BATCHES = 10
BATCH_QUEUE_DEPTH = 50
"""The gateway's batch queue cap in this bench: 10 batches fill it at once."""
UPLOAD_LINES = 50_000
SLOW_READERS = 40
BAD_KEYS_PER_MIN = 100
SETTLE_TIMEOUT_S = 90.0
MAX_TRIES_PER_SAMPLE = 3
"""A phase whose interactive requests fail this often per sample stops the bench."""
KEY_RATE_PER_MIN = 1_000_000
REFUSALS = frozenset({401, 403, 429})
NOT_A_REFUSAL = frozenset({"quota_exceeded", "queue_full"})


# ------------------------------------------------------------------ pure parts


@dataclass
class Tally:
    """Answers seen in one phase, by whom: thread-safe counts."""

    statuses: Counter[int] = field(default_factory=Counter)
    http_5xx: int = 0
    valid_key_refusals: int = 0
    errors: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def answer(self, status: int, *, valid_key: bool, code: str | None = None) -> None:
        """Count one answer; ``valid_key``: it was sent with a valid key, so a 401, 403
        or 429 (a quota or a full queue aside) refused a tenant it should have served."""
        with self._lock:
            self.statuses[status] += 1
            if status >= 500:
                self.http_5xx += 1
            if valid_key and status in REFUSALS and code not in NOT_A_REFUSAL:
                self.valid_key_refusals += 1

    def failed(self) -> None:
        """A request that got no answer at all (connection refused or reset, timed out)."""
        with self._lock:
            self.errors += 1


def phase_result(
    name: str,
    ttfts_ms: list[float],
    tally: Tally,
    *,
    idle: tuple[float, float] | None,
    stuck_running: int,
    attack_requests: int,
) -> dict[str, Any]:
    """One phase's JSON; ``idle``: the idle phase's (p50, p99), None for idle itself."""
    if not ttfts_ms:
        raise ValueError(f"phase {name} has no interactive samples")
    p50, p99 = median(ttfts_ms), percentile(ttfts_ms, 99)
    base = (p50, p99) if idle is None else idle
    return {
        "phase": name,
        "attack": ATTACKS[name],
        "n": len(ttfts_ms),
        "ttft_ms_p50": rounded(p50),
        "ttft_ms_p99": rounded(p99),
        "p50_ratio": round(p50 / base[0], 3),
        "p99_ratio": round(p99 / base[1], 3),
        "http_5xx": tally.http_5xx,
        "valid_key_refusals": tally.valid_key_refusals,
        "no_answer": tally.errors,
        "stuck_running": stuck_running,
        "attack_requests": attack_requests,
        "statuses": {str(code): n for code, n in sorted(tally.statuses.items())},
        "ttft_samples_ms": [rounded(x) for x in ttfts_ms],
    }


def summary(phases: list[dict[str, Any]], *, tier: Tier, samples: int) -> dict[str, Any]:
    """The bench's JSON: the phases, and the figures its goals judge."""
    attacks = [p for p in phases if p["phase"] != "idle"]
    worst = max(attacks, key=lambda p: p["p99_ratio"]) if attacks else None
    return {
        "bench": "abuse",
        "tier": tier.value,
        "samples_per_phase": samples,
        "idle_ttft_ms_p50": next((p["ttft_ms_p50"] for p in phases if p["phase"] == "idle"), None),
        "idle_ttft_ms_p99": next((p["ttft_ms_p99"] for p in phases if p["phase"] == "idle"), None),
        "worst_phase_p99_ratio": worst["p99_ratio"] if worst else None,
        "worst_phase": worst["phase"] if worst else None,
        "http_5xx": sum(p["http_5xx"] for p in phases),
        "valid_key_refusals": sum(p["valid_key_refusals"] for p in phases),
        "stuck_running": max((p["stuck_running"] for p in phases), default=0),
        "no_answer": sum(p["no_answer"] for p in phases),
        "phases": phases,
    }


def batch_line(index: int, *, max_tokens: int, content: str | None = None) -> str:
    """One request line of a batch file."""
    body = {
        "model": "auto",
        "messages": [{"role": "user", "content": content or f"Summarise ticket {index}."}],
        "max_tokens": max_tokens,
    }
    return json.dumps(
        {"custom_id": f"r{index}", "method": "POST", "url": "/v1/chat/completions", "body": body}
    )


def batch_file(lines: int, *, max_tokens: int = 16) -> bytes:
    """A JSONL batch file of ``lines`` requests."""
    return "".join(batch_line(i, max_tokens=max_tokens) + "\n" for i in range(lines)).encode()


def gateway_env(tier: Tier, *, batch_queue_depth: int) -> dict[str, str]:
    """The gateway's own settings: ``tier``'s batch queue capped at ``batch_queue_depth``."""
    depth = {"interactive": 1_000, "batch": batch_queue_depth}
    return {"LLMQ_TIERS": json.dumps({tier.value: {"max_queue_depth": depth}})}


@dataclass(frozen=True)
class BadInput:
    """One malformed request: method, path, and a JSON body or raw bytes."""

    method: str
    path: str
    json_body: dict[str, Any] | None = None
    raw: bytes | None = None


def bad_inputs(max_body_bytes: int) -> list[BadInput]:
    """Requests a valid key sends that must be refused with a 4xx, never a 5xx: NUL in a
    message, in ids of a job, file and batch, and a body past the limit."""
    nul_chat = {"model": "auto", "messages": [{"role": "user", "content": "hi\x00there"}]}
    oversized = b'{"model": "auto", "messages": [{"role": "user", "content": "'
    oversized += b"x" * (max_body_bytes + 1) + b'"}]}'
    return [
        BadInput("POST", "/v1/chat/completions", json_body=nul_chat),
        BadInput("GET", "/v1/jobs/job%00x"),
        BadInput("GET", "/v1/files/file-%00x"),
        BadInput("GET", "/v1/files/file-%00x/content"),
        BadInput("GET", "/v1/batches/batch_%00x"),
        BadInput("POST", "/v1/batches", json_body={"input_file_id": "file-\x00"}),
        BadInput("POST", "/v1/chat/completions", raw=oversized),
    ]


# ------------------------------------------------------------------ the run


@dataclass
class Stage:
    """What every phase shares: the gateway, two valid keys, the job database."""

    rig: Rig
    url: str
    user: dict[str, str]
    """The interactive stream's key."""
    tenant: dict[str, str]
    """The attacking tenant's key (a valid one: its refusals count too)."""
    max_tokens: int
    rng: random.Random
    file_id: str | None = None
    """The 50,000-line file big_upload leaves for slow_readers."""
    batch_file_id: str | None = None
    batches: list[str] = field(default_factory=list)


def run_abuse(
    settings: Settings,
    *,
    tier: Tier,
    samples: int,
    max_tokens: int,
    port: int,
    seed: int,
    phases: tuple[str, ...] | None = None,
) -> dict[str, Any]:
    """Run ``phases`` (every one of :data:`PHASES` when None; ``idle`` first, always)
    against a warm worker and a gateway."""
    phases = PHASES if phases is None else phases
    if samples < MIN_SAMPLES:
        raise ValueError(f"a p99 needs at least {MIN_SAMPLES} samples per phase")
    unknown = set(phases) - set(PHASES)
    if unknown:
        raise ValueError(f"unknown phases {sorted(unknown)}; known: {', '.join(PHASES)}")
    order = ["idle", *(p for p in PHASES if p in phases and p != "idle")]
    with bench_rig(settings, tier, prefill_prompts=False) as rig:
        sessions = rig.client.sessions
        user = create_key(sessions, "abuse-user", rate_limit_per_min=KEY_RATE_PER_MIN)[1]
        tenant = create_key(sessions, "abuse-tenant", rate_limit_per_min=KEY_RATE_PER_MIN)[1]
        env = gateway_env(tier, batch_queue_depth=BATCH_QUEUE_DEPTH)
        with gateway_process(rig.settings, port, env=env) as url:
            stage = Stage(
                rig=rig,
                url=url,
                user={"Authorization": f"Bearer {user}"},
                tenant={"Authorization": f"Bearer {tenant}"},
                max_tokens=max_tokens,
                rng=random.Random(seed),
            )
            results: list[dict[str, Any]] = []
            idle: tuple[float, float] | None = None
            for name in order:
                result = _phase(stage, name, samples=samples, idle=idle)
                if name == "idle":
                    idle = (result["ttft_ms_p50"], result["ttft_ms_p99"])
                results.append(result)
    return summary(results, tier=tier, samples=samples)


Attack = Callable[[Stage, threading.Event, Tally, Counter[str]], None]
"""Runs until the event is set; counts its requests under "sent" in the counter."""


def _phase(
    stage: Stage, name: str, *, samples: int, idle: tuple[float, float] | None
) -> dict[str, Any]:
    tally = Tally()
    sent: Counter[str] = Counter()
    stop = threading.Event()
    setup, threads, teardown = PHASE_PLANS[name]
    with step(f"{name}: setting up"):
        setup(stage, tally)
    workers = [
        threading.Thread(target=attack, args=(stage, stop, tally, sent), daemon=True)
        for attack in threads
    ]
    for worker in workers:
        worker.start()
    ttfts: list[float] = []
    try:
        with (
            httpx.Client(base_url=stage.url, timeout=300) as http,
            counted(f"{name}: interactive requests", samples) as bar,
        ):
            tries = 0
            while len(ttfts) < samples:
                tries += 1
                if tries > samples * MAX_TRIES_PER_SAMPLE:
                    raise RuntimeError(
                        f"{name}: only {len(ttfts)} of {tries - 1} interactive requests "
                        f"streamed text (answers: {dict(tally.statuses)})"
                    )
                time.sleep(0.05 + stage.rng.random() * 0.2)
                ttft = _interactive(http, stage, tally)
                if ttft is not None:
                    ttfts.append(ttft)
                    bar.advance()
    finally:
        stop.set()
        for worker in workers:
            worker.join(timeout=60)
    with step(f"{name}: settling"):
        teardown(stage, tally)
        stuck = _settle(stage)
    return phase_result(
        name, ttfts, tally, idle=idle, stuck_running=stuck, attack_requests=sent["sent"]
    )


def _interactive(http: httpx.Client, stage: Stage, tally: Tally) -> float | None:
    """One streamed request of the valid key; its TTFT, or None if it was refused."""
    body = {
        "model": stage.rig.tier.value,
        "stream": True,
        "messages": [{"role": "user", "content": "What are your opening hours on weekends?"}],
        "max_tokens": stage.max_tokens,
        "temperature": 0.0,
    }
    started = time.perf_counter()
    ttft = None
    try:
        with http.stream("POST", "/v1/chat/completions", json=body, headers=stage.user) as response:
            if response.status_code != 200:
                response.read()
                tally.answer(response.status_code, valid_key=True, code=_code(response))
                return None
            tally.answer(200, valid_key=True)
            for line in response.iter_lines():
                if ttft is None and '"content"' in line:
                    ttft = (time.perf_counter() - started) * 1000.0
    except httpx.HTTPError:
        tally.failed()
        return None
    return ttft


def _code(response: httpx.Response) -> str | None:
    try:
        error = response.json().get("error") or {}
    except (ValueError, AttributeError):
        return None
    code = error.get("code") if isinstance(error, dict) else None
    return code if isinstance(code, str) else None


def _call(
    http: httpx.Client,
    tally: Tally,
    sent: Counter[str],
    method: str,
    path: str,
    *,
    valid_key: bool,
    **kwargs: Any,
) -> httpx.Response | None:
    sent["sent"] += 1
    try:
        response = http.request(method, path, **kwargs)
    except httpx.HTTPError:
        tally.failed()
        return None
    tally.answer(response.status_code, valid_key=valid_key, code=_code(response))
    return response


def _settle(stage: Stage) -> int:
    """Wait for the phase's jobs to end; the rows still ``running`` after the wait."""
    deadline = time.monotonic() + SETTLE_TIMEOUT_S
    while True:
        with stage.rig.client.sessions() as session:
            running = int(
                session.scalar(select(func.count()).where(Job.status == JobStatus.RUNNING.value))
                or 0
            )
        if running == 0 or time.monotonic() > deadline:
            return running
        time.sleep(0.5)


# ------------------------------------------------------------------ the attacks


def _nothing(_stage: Stage, _tally: Tally) -> None:
    return None


def _flood(path: str, *, keyed: bool) -> Attack:
    """GET ``path`` as fast as one thread can: with the tenant's key, or with none."""

    def attack(stage: Stage, stop: threading.Event, tally: Tally, sent: Counter[str]) -> None:
        headers = stage.tenant if keyed else {}
        with httpx.Client(base_url=stage.url, timeout=30) as http:
            while not stop.is_set():
                _call(http, tally, sent, "GET", path, valid_key=keyed, headers=headers)

    return attack


def _batches_setup(stage: Stage, tally: Tally) -> None:
    """Ten batches of the tenant, each twice as long as the queue is deep, made at once."""
    with httpx.Client(base_url=stage.url, timeout=120) as http:
        stage.batch_file_id = _upload(http, stage, tally, batch_file(BATCH_QUEUE_DEPTH * 2))
        for _ in range(BATCHES):
            made = http.post(
                "/v1/batches",
                json={
                    "input_file_id": stage.batch_file_id,
                    "endpoint": "/v1/chat/completions",
                    "completion_window": "24h",
                    "tier": stage.rig.tier.value,
                },
                headers=stage.tenant,
            )
            tally.answer(made.status_code, valid_key=True, code=_code(made))
            if made.status_code == 200:
                stage.batches.append(str(made.json()["id"]))


def _batches_teardown(stage: Stage, tally: Tally) -> None:
    """Cancel the ten batches, wait for them to end, delete their file."""
    with httpx.Client(base_url=stage.url, timeout=120) as http:
        for batch_id in stage.batches:
            answer = http.post(f"/v1/batches/{batch_id}/cancel", headers=stage.tenant)
            tally.answer(answer.status_code, valid_key=True, code=_code(answer))
        deadline = time.monotonic() + SETTLE_TIMEOUT_S
        for batch_id in stage.batches:
            while time.monotonic() < deadline:
                answer = http.get(f"/v1/batches/{batch_id}", headers=stage.tenant)
                tally.answer(answer.status_code, valid_key=True, code=_code(answer))
                if answer.status_code != 200 or answer.json()["status"] == "cancelled":
                    break
                time.sleep(0.5)
        if stage.batch_file_id is not None:
            _delete(http, stage, tally, stage.batch_file_id)
    stage.batch_file_id = None
    stage.batches = []


def _upload(http: httpx.Client, stage: Stage, tally: Tally, content: bytes) -> str:
    answer = http.post(
        "/v1/files",
        files={"file": ("abuse.jsonl", io.BytesIO(content), "application/jsonl")},
        data={"purpose": "batch"},
        headers=stage.tenant,
    )
    tally.answer(answer.status_code, valid_key=True, code=_code(answer))
    answer.raise_for_status()
    return str(answer.json()["id"])


def _delete(http: httpx.Client, stage: Stage, tally: Tally, file_id: str) -> None:
    answer = http.delete(f"/v1/files/{file_id}", headers=stage.tenant)
    tally.answer(answer.status_code, valid_key=True, code=_code(answer))


def _big_uploads(stage: Stage, stop: threading.Event, tally: Tally, sent: Counter[str]) -> None:
    """Upload 50,000-line files one after another; the last one is kept for the readers."""
    content = batch_file(UPLOAD_LINES)
    with httpx.Client(base_url=stage.url, timeout=600) as http:
        while not stop.is_set():
            sent["sent"] += 1
            try:
                file_id = _upload(http, stage, tally, content)
            except httpx.HTTPStatusError:
                continue  # counted by its status
            except httpx.HTTPError:
                tally.failed()
                continue
            if stage.file_id is not None:
                _delete(http, stage, tally, stage.file_id)
            stage.file_id = file_id


def _readers_setup(stage: Stage, tally: Tally) -> None:
    if stage.file_id is None:  # big_upload did not run: a file of its size
        with httpx.Client(base_url=stage.url, timeout=600) as http:
            stage.file_id = _upload(http, stage, tally, batch_file(UPLOAD_LINES))


def _slow_reader(stage: Stage, stop: threading.Event, tally: Tally, sent: Counter[str]) -> None:
    """Read the file's content a KiB at a time, slowly, from the start again at its end."""
    with httpx.Client(base_url=stage.url, timeout=300) as http:
        while not stop.is_set():
            sent["sent"] += 1
            path = f"/v1/files/{stage.file_id}/content"
            try:
                with http.stream("GET", path, headers=stage.tenant) as response:
                    tally.answer(response.status_code, valid_key=True, code=_code_of(response))
                    for _piece in response.iter_raw(1024):
                        if stop.wait(0.2):
                            break
            except httpx.HTTPError:
                tally.failed()


def _code_of(response: httpx.Response) -> str | None:
    if response.status_code == 200:
        return None
    response.read()
    return _code(response)


def _readers_teardown(stage: Stage, tally: Tally) -> None:
    if stage.file_id is not None:
        with httpx.Client(base_url=stage.url, timeout=120) as http:
            _delete(http, stage, tally, stage.file_id)
        stage.file_id = None


def _bad_keys(stage: Stage, stop: threading.Event, tally: Tally, sent: Counter[str]) -> None:
    """A bad key every 0.6 s (100 a minute), from the interactive key's own address."""
    with httpx.Client(base_url=stage.url, timeout=30) as http:
        while not stop.wait(60.0 / BAD_KEYS_PER_MIN):
            headers = {"Authorization": f"Bearer llmq-{secrets.token_urlsafe(16)}"}
            _call(http, tally, sent, "GET", "/v1/models", valid_key=False, headers=headers)


def _bad_input(stage: Stage, stop: threading.Event, tally: Tally, sent: Counter[str]) -> None:
    """The malformed requests of :func:`bad_inputs`, and a file with a NUL line, in turn."""
    cases = bad_inputs(stage.rig.settings.max_body_bytes)
    nul_file = (batch_line(0, max_tokens=4, content="a\x00b") + "\n").encode()
    turn = 0
    with httpx.Client(base_url=stage.url, timeout=60) as http:
        while not stop.wait(0.25):
            turn += 1
            if turn % (len(cases) + 1) == 0:
                sent["sent"] += 1
                with contextlib.suppress(httpx.HTTPError):
                    _delete(http, stage, tally, _upload(http, stage, tally, nul_file))
                continue
            case = cases[turn % (len(cases) + 1) - 1]
            extra: dict[str, Any] = {"headers": stage.tenant}
            if case.json_body is not None:
                extra["json"] = case.json_body
            if case.raw is not None:
                extra["content"] = case.raw
                extra["headers"] = {**stage.tenant, "Content-Type": "application/json"}
            _call(http, tally, sent, case.method, case.path, valid_key=True, **extra)


Setup = Callable[[Stage, Tally], None]
PHASE_PLANS: dict[str, tuple[Setup, tuple[Attack, ...], Setup]] = {
    "idle": (_nothing, (), _nothing),
    "metrics_readyz_flood": (
        _nothing,
        (
            _flood("/metrics", keyed=True),
            _flood("/metrics", keyed=True),
            _flood("/metrics", keyed=False),
            _flood("/readyz", keyed=False),
            _flood("/readyz", keyed=False),
            _flood("/healthz", keyed=False),
        ),
        _nothing,
    ),
    "batch_flood": (_batches_setup, (), _batches_teardown),
    "big_upload": (_nothing, (_big_uploads,), _nothing),
    "slow_readers": (_readers_setup, (_slow_reader,) * SLOW_READERS, _readers_teardown),
    "bad_keys": (_nothing, (_bad_keys,), _nothing),
    "bad_input": (_nothing, (_bad_input,), _nothing),
}
