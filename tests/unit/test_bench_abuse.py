"""llmq bench abuse's pure parts: what it counts, how a phase and the run are summed
up, and the inputs it sends (no engine, no gateway)."""

from __future__ import annotations

import inspect
import json

import pytest

from bench import abuse
from bench.cli import BENCHES
from schemas.queues import Priority, Tier
from schemas.settings import Settings


def test_a_valid_keys_401_403_or_429_is_a_refusal_but_a_quota_or_a_bad_key_is_not() -> None:
    tally = abuse.Tally()
    for status in (401, 403, 429):
        tally.answer(status, valid_key=True, code="rate_limit_exceeded")
    tally.answer(429, valid_key=True, code="quota_exceeded")
    tally.answer(429, valid_key=True, code="queue_full")
    tally.answer(401, valid_key=False)  # a bad key's refusal is the point
    tally.answer(400, valid_key=True)
    tally.answer(503, valid_key=False)
    tally.answer(500, valid_key=True)
    tally.failed()
    assert tally.valid_key_refusals == 3
    assert tally.http_5xx == 2
    assert tally.errors == 1
    assert tally.statuses[429] == 3 and tally.statuses[401] == 2


def test_a_phase_is_judged_against_the_idle_phase() -> None:
    tally = abuse.Tally()
    tally.answer(200, valid_key=True)
    idle = abuse.phase_result(
        "idle", [100.0] * 99 + [200.0], tally, idle=None, stuck_running=0, attack_requests=0
    )
    assert idle["p50_ratio"] == 1.0 and idle["p99_ratio"] == 1.0
    assert idle["ttft_ms_p50"] == 100.0
    loaded = abuse.phase_result(
        "bad_keys",
        [150.0] * 100,
        tally,
        idle=(idle["ttft_ms_p50"], idle["ttft_ms_p99"]),
        stuck_running=2,
        attack_requests=40,
    )
    assert loaded["p50_ratio"] == 1.5
    assert loaded["p99_ratio"] == round(150.0 / idle["ttft_ms_p99"], 3)
    assert loaded["attack"] == abuse.ATTACKS["bad_keys"]
    assert loaded["stuck_running"] == 2 and loaded["attack_requests"] == 40
    assert loaded["statuses"] == {"200": 1}
    with pytest.raises(ValueError, match="no interactive samples"):
        abuse.phase_result("idle", [], tally, idle=None, stuck_running=0, attack_requests=0)


def test_the_summary_names_the_worst_phase_and_adds_up_what_went_wrong() -> None:
    def phase(name: str, p99_ratio: float, **counts: int) -> dict[str, object]:
        zeros = {"http_5xx": 0, "valid_key_refusals": 0, "stuck_running": 0, "no_answer": 0}
        return {
            "phase": name,
            "p99_ratio": p99_ratio,
            "ttft_ms_p50": 100.0,
            "ttft_ms_p99": 150.0,
            **zeros,
            **counts,
        }

    phases = [
        phase("idle", 1.0),
        phase("batch_flood", 1.4, http_5xx=1, stuck_running=3),
        phase("bad_keys", 1.2, valid_key_refusals=2, stuck_running=3),
    ]
    result = abuse.summary(phases, tier=Tier.SMALL, samples=100)  # type: ignore[arg-type]
    assert result["worst_phase_p99_ratio"] == 1.4 and result["worst_phase"] == "batch_flood"
    assert result["http_5xx"] == 1 and result["valid_key_refusals"] == 2
    assert result["stuck_running"] == 3  # a row stuck in one phase is still there later
    assert [p["phase"] for p in result["phases"]] == ["idle", "batch_flood", "bad_keys"]
    assert result["idle_ttft_ms_p99"] == 150.0


def test_every_phase_has_an_attack_and_a_plan_and_the_command_runs_them_all() -> None:
    assert set(abuse.PHASES) == set(abuse.ATTACKS) == set(abuse.PHASE_PLANS)
    (entry,) = [b for b in BENCHES if b.name == "abuse"]
    (phases,) = [o for o in entry.options if "--phases" in o.flags]
    assert phases.default is None  # run_abuse then runs every phase
    assert inspect.signature(abuse.run_abuse).parameters["phases"].default is None


def test_fewer_samples_than_a_p99_needs_or_an_unknown_phase_is_refused() -> None:
    with pytest.raises(ValueError, match="at least 100"):
        abuse.run_abuse(Settings(), tier=Tier.SMALL, samples=99, max_tokens=2, port=1, seed=1)
    with pytest.raises(ValueError, match="unknown phases"):
        abuse.run_abuse(
            Settings(),
            tier=Tier.SMALL,
            samples=100,
            max_tokens=2,
            port=1,
            seed=1,
            phases=("idle", "nope"),
        )


def test_the_inputs_it_sends() -> None:
    content = abuse.batch_file(3, max_tokens=5)
    lines = [json.loads(x) for x in content.decode().splitlines()]
    assert [x["custom_id"] for x in lines] == ["r0", "r1", "r2"]
    assert lines[0]["body"]["max_tokens"] == 5
    env = json.loads(abuse.gateway_env(Tier.SMALL, batch_queue_depth=7)["LLMQ_TIERS"])
    assert env == {"small": {"max_queue_depth": {"interactive": 1000, "batch": 7}}}
    assert Settings(tiers=env).tier(Tier.SMALL).max_queue_depth[Priority.BATCH] == 7
    bad = abuse.bad_inputs(2048)
    oversized = [case for case in bad if case.raw is not None]
    assert len(oversized) == 1 and len(oversized[0].raw or b"") > 2048
    nul = [case for case in bad if case.json_body is not None and r"\x00" in repr(case.json_body)]
    assert len(nul) == 2
    assert any("%00" in case.path for case in bad)
