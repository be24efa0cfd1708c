"""``llmq bench compat``: the OpenAI features a client written for vLLM's own server
relies on, probed on that server and then on llmq's gateway, same model and engine
settings, one engine up at a time.

Each probe (:data:`bench.compat_probes.PROBES`) tries one feature over plain HTTP and
checks the reply's shape and behaviour. vLLM's server runs first (``python -m
vllm.entrypoints.openai.api_server`` with the tier's engine settings, as ``llmq bench
peer`` starts it) and is stopped before llmq's stack (a private Redis, a SQLite job
database, one warm worker and ``llmq gateway``) starts. ``llmq_missing`` names the
probes vLLM's server passes and llmq's gateway fails: what a team moving from one to
the other would lose.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Iterator, Sequence
from typing import Any

import httpx

from bench.compat_checks import Api
from bench.compat_probes import PROBES, Probe, run_probe
from bench.harness import counted, step
from schemas.queues import Tier
from schemas.settings import Settings

SIDES = ("vllm", "llmq")
REQUEST_TIMEOUT_S = 300.0
VLLM_TOOL_FLAGS = ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
"""How a vLLM user serving tools starts the server: without a tool-call parser it
refuses every ``tool_choice`` but none (even a named function or ``required``, which
the engine's grammar forces); hermes is the form llmq reads under ``auto`` too."""


def run_compat(settings: Settings, *, tier: Tier) -> dict[str, Any]:
    """Run every probe on vLLM's server, then on llmq's gateway; see :func:`compat_report`."""
    results: dict[str, dict[str, dict[str, Any]]] = {}
    for side in SIDES:
        with contextlib.ExitStack() as stack:
            with step(f"{side}: starting its server"):
                base_url, api_key, model = stack.enter_context(_server(side, settings, tier))
            results[side] = probe_server(base_url, api_key, model, label=side)
    report = compat_report(results, tier=tier)
    print(format_table(report), file=sys.stderr)
    return report


@contextlib.contextmanager
def _server(side: str, settings: Settings, tier: Tier) -> Iterator[tuple[str, str, str]]:
    from bench.peer import llmq_stack, vllm_server

    concurrency = settings.tier(tier).concurrency
    if side == "vllm":
        server = vllm_server(settings, tier, concurrency, server_flags=VLLM_TOOL_FLAGS)
    else:
        server = llmq_stack(settings, tier, concurrency)
    with server as endpoint:
        yield endpoint.base_url, endpoint.api_key, endpoint.model


def probe_server(
    base_url: str,
    api_key: str,
    model: str,
    *,
    label: str,
    probes: Sequence[Probe] = PROBES,
    transport: httpx.BaseTransport | None = None,
) -> dict[str, dict[str, Any]]:
    """Every probe against one server, in order: ``{name: {"passed", "detail"}}``."""
    headers = {"Authorization": f"Bearer {api_key}"}
    results: dict[str, dict[str, Any]] = {}
    with (
        httpx.Client(
            base_url=base_url, headers=headers, timeout=REQUEST_TIMEOUT_S, transport=transport
        ) as http,
        counted(f"{label}: probes", len(probes), unit="probes") as bar,
    ):
        api = Api(http, model)
        for probe in probes:
            results[probe.name] = run_probe(probe, api)
            bar.advance()
    return results


def compat_report(
    results: dict[str, dict[str, dict[str, Any]]],
    *,
    tier: Tier,
    probes: Sequence[Probe] = PROBES,
) -> dict[str, Any]:
    """The figures: passes per side, ``llmq_missing`` (vLLM passes, llmq fails),
    ``llmq_only`` (the other way round), and each probe's result on each side."""
    vllm, llmq = results.get("vllm", {}), results.get("llmq", {})

    def passed(side: dict[str, dict[str, Any]], name: str) -> bool:
        return bool(side.get(name, {}).get("passed"))

    names = [probe.name for probe in probes]
    return {
        "bench": "compat",
        "tier": tier.value,
        "total": len(names),
        "vllm_passed": sum(passed(vllm, name) for name in names),
        "llmq_passed": sum(passed(llmq, name) for name in names),
        "llmq_missing": [n for n in names if passed(vllm, n) and not passed(llmq, n)],
        "llmq_only": [n for n in names if passed(llmq, n) and not passed(vllm, n)],
        "probes": {
            probe.name: {
                "feature": probe.feature,
                **{side: results[side][probe.name] for side in SIDES if side in results},
            }
            for probe in probes
        },
    }


def format_table(report: dict[str, Any]) -> str:
    """One line a probe: its name, pass or fail on each side, and why llmq's failed."""
    lines = [f"{'probe':<24}{'vllm':<6}{'llmq':<6}feature / why llmq failed"]
    for name, entry in report["probes"].items():
        marks = []
        for side in SIDES:
            result = entry.get(side)
            marks.append("-" if result is None else "pass" if result["passed"] else "FAIL")
        why = entry.get("llmq", {}).get("detail") or entry["feature"]
        lines.append(f"{name:<24}{marks[0]:<6}{marks[1]:<6}{why}")
    lines.append(
        f"passed: vllm {report['vllm_passed']}/{report['total']}, "
        f"llmq {report['llmq_passed']}/{report['total']}; "
        f"llmq missing: {', '.join(report['llmq_missing']) or 'none'}"
    )
    return "\n".join(lines)
