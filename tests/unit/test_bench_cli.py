"""``llmq bench``: one table entry per benchmark, wired to the function that runs it."""

from __future__ import annotations

import inspect
import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

import bench.faults
import bench.peer
from bench import cli
from bench.faults import FaultPlan
from bench.peer import PeerPlan
from producer.cli import build_parser, main
from schemas.queues import Tier
from schemas.settings import Settings

NAMES = [entry.name for entry in cli.BENCHES]
PLAIN = [entry for entry in cli.BENCHES if isinstance(entry.run, str)]


def test_every_benchmark_is_a_command_with_help() -> None:
    assert len(set(NAMES)) == len(NAMES)
    root = Path(__file__).parents[2]
    pages = [root / "README.md", *sorted((root / "docs").glob("*.md"))]
    documented = "\n".join(page.read_text() for page in pages)
    undocumented = [name for name in NAMES if f"llmq bench {name}" not in documented]
    assert not undocumented, f"neither README nor docs/ mention llmq bench {undocumented}"
    parser = build_parser()
    for name in NAMES:
        args = parser.parse_args(["bench", name])
        assert callable(args.handler)
        assert args.json is False
    for entry in cli.BENCHES:
        assert entry.help
        assert all(option.help for option in entry.options)


def test_an_engine_benchmark_takes_a_tier_and_the_others_do_not() -> None:
    parser = build_parser()
    assert parser.parse_args(["bench", "overhead", "--tier", "medium"]).tier == "medium"
    with pytest.raises(SystemExit):
        parser.parse_args(["bench", "classifier", "--tier", "small"])


@pytest.mark.parametrize("entry", PLAIN, ids=[entry.name for entry in PLAIN])
def test_a_plain_benchmark_gets_every_keyword_its_function_takes(
    entry: cli.Bench, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    assert isinstance(entry.run, str)
    module_name, _, function = entry.run.partition(":")
    module = __import__(module_name, fromlist=[function])
    real = inspect.signature(getattr(module, function))
    seen: dict[str, Any] = {}

    def fake(settings: object, **values: Any) -> dict[str, Any]:
        seen.update(values)
        return {"bench": entry.name}

    monkeypatch.setattr(module, function, fake)
    assert main(["bench", entry.name, "--tier", "large", "--json"]) == 0
    assert set(seen) == set(list(real.parameters)[1:])
    assert seen["tier"] is Tier.LARGE
    result = json.loads(capsys.readouterr().out.splitlines()[-1])
    assert result["bench"] == entry.name
    assert set(result) - {"settings_from_env"} == {"bench", "host", "commit"}


def test_a_bench_has_vllm_log_to_stderr_so_stdout_keeps_the_json(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    entry = PLAIN[0]
    assert isinstance(entry.run, str)
    module_name, _, function = entry.run.partition(":")
    module = __import__(module_name, fromlist=[function])
    monkeypatch.setattr(module, function, lambda settings, **values: {"bench": entry.name})
    monkeypatch.setenv("VLLM_LOGGING_STREAM", "unset below")
    monkeypatch.delenv("VLLM_LOGGING_STREAM")
    assert main(["bench", entry.name, "--json"]) == 0
    assert os.environ["VLLM_LOGGING_STREAM"] == "ext://sys.stderr"
    assert json.loads(capsys.readouterr().out)["bench"] == entry.name


def test_a_result_names_the_settings_the_environment_changed_but_no_credential() -> None:
    environ = {
        "LLMQ_TIERS": '{"small": {"reserved_interactive_slots": 2}}',
        "LLMQ_DATABASE_URL": "postgresql+psycopg://u:secret@db/llmq",
        "LLMQ_BROKER_URL": "redis://:secret@cache:6379/0",
        "LLMQ_TEST_SLOT": "3",
        "HOME": "/root",
    }
    assert cli.settings_from_env(environ) == {
        "LLMQ_BROKER_URL": "(set)",
        "LLMQ_DATABASE_URL": "(set)",
        "LLMQ_TIERS": '{"small": {"reserved_interactive_slots": 2}}',
    }


def test_peer_and_faults_get_their_plans(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    seen: dict[str, Any] = {}

    def fake_peer(settings: object, *, tier: Tier, plan: PeerPlan) -> dict[str, Any]:
        seen["peer"] = (tier, plan)
        return {}

    def fake_faults(settings: Any, plan: FaultPlan) -> dict[str, Any]:
        seen["faults"] = (settings.database_url, plan)
        return {"jobs_lost": 0}

    monkeypatch.setattr(bench.peer, "run_peer", fake_peer)
    monkeypatch.setattr(bench.faults, "run_faults", fake_faults)
    assert main(["bench", "peer", "-n", "5", "--json"]) == 0
    assert seen["peer"] == (Tier.SMALL, PeerPlan(single=5))
    args = ["bench", "faults", "--kills", "3", "--logs", str(tmp_path)]
    assert main([*args, "--database-url", "sqlite:///lab.db"]) == 0
    assert seen["faults"] == ("sqlite:///lab.db", FaultPlan(kills=3, logs_dir=tmp_path))
    out = capsys.readouterr().out.splitlines()
    assert out[-4].strip() == "jobs_lost: 0"  # the readable lines come first
    result = json.loads(out[-1])
    assert result["jobs_lost"] == 0
    # Every result names the host and the commit it ran on.
    assert "cores" in result["host"]
    assert result["commit"] is None or len(result["commit"]) >= 7


def test_a_bad_routing_mix_is_refused_in_words(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setattr(cli, "_trained_router", lambda settings: (object(), object()))
    assert main(["bench", "routing", "--mix", "0.5,0.5"]) == 1
    assert "--mix needs three shares" in capsys.readouterr().err


def test_routing_gets_every_keyword_its_function_takes(monkeypatch: pytest.MonkeyPatch) -> None:
    import bench.routing

    real = inspect.signature(bench.routing.run_routing)
    seen: dict[str, Any] = {}

    def fake(settings: object, classifier: object, policy: object, **values: Any) -> dict[str, Any]:
        seen.update(values)
        return {}

    monkeypatch.setattr(cli, "_trained_router", lambda settings: (object(), object()))
    monkeypatch.setattr(bench.routing, "run_routing", fake)
    assert main(["bench", "routing", "--json"]) == 0
    assert set(seen) == set(list(real.parameters)[3:])
    assert seen["mix"] == {Tier.SMALL: 0.6, Tier.MEDIUM: 0.25, Tier.LARGE: 0.15}
    assert seen["profile_path"] == Path("deploy/profiles/gpu-h100.json")


def test_a_bench_says_what_it_runs_and_how_long_it_took_on_stderr_only(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bench.warm

    monkeypatch.setattr(bench.warm, "run_warm", lambda settings, **values: {"bench": "warm"})
    assert main(["bench", "warm", "--json"]) == 0
    out, err = capsys.readouterr()
    assert out.count("\n") == 1 and json.loads(out)["bench"] == "warm"
    assert err.startswith("llmq bench warm: TTFT: cold engine vs warmed worker")
    assert "llmq bench warm: finished in " in err


def test_paired_samples_show_a_bar_over_warm_up_and_samples(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    from bench import harness

    monkeypatch.setattr(harness, "SETTLE_S", 0.0)
    a, b = harness.paired_samples(float, lambda i: -float(i), samples=4, label="gateway")
    assert a == [3.0, 4.0, 5.0, 6.0] and b == [-3.0, -4.0, -5.0, -6.0]
    out, err = capsys.readouterr()
    assert out == ""
    assert "gateway (3 warm-up) [" in err and "7/7 pairs 100%" in err


def test_a_bench_gets_a_fresh_migrated_database_unless_one_is_named(tmp_path: Path) -> None:
    import sqlalchemy

    from bench.harness import bench_database
    from schemas.settings import Settings

    with bench_database(Settings()) as settings:
        assert settings.database_url.startswith("sqlite:///") and "llmq-bench-db-" in (
            settings.database_url
        )
        engine = sqlalchemy.create_engine(settings.database_url)
        assert "jobs" in sqlalchemy.inspect(engine).get_table_names()
        engine.dispose()
    named = f"sqlite:///{tmp_path / 'mine.db'}"
    with bench_database(Settings(database_url=named)) as settings:
        assert settings.database_url == named


def test_alternating_pairs_run_the_second_side_first_in_odd_rounds(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from bench import harness

    monkeypatch.setattr(harness, "SETTLE_S", 0.0)
    calls: list[str] = []

    def side(name: str, value: float) -> Callable[[int], float]:
        def sample(index: int) -> float:
            calls.append(f"{name}{index}")
            return value + index

        return sample

    a, b = harness.paired_samples(side("a", 0.0), side("b", 100.0), samples=2, alternate=True)
    assert calls == ["a0", "b0", "b1", "a1", "a2", "b2", "b3", "a3", "a4", "b4"]
    assert a == [3.0, 4.0] and b == [103.0, 104.0]


def test_the_report_runs_a_bench_with_its_defaults_and_the_values_given(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import bench.warm

    seen: dict[str, Any] = {}

    def fake(settings: object, **values: Any) -> dict[str, Any]:
        seen.update(values)
        return {"bench": "warm"}

    monkeypatch.setattr(bench.warm, "run_warm", fake)
    result = cli.run_with_defaults(Settings(), "warm", {"max_tokens": 3}, Tier.LARGE)
    assert result == {"bench": "warm"}
    assert seen == {"prompt": "support", "max_tokens": 3, "tier": Tier.LARGE}
