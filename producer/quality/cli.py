"""``llmq ab``: the A/B quality gate, and ``llmq ab promote`` / ``llmq ab show``."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from schemas.queues import Tier
from schemas.tier_option import tier_option

_tier = tier_option("small, medium, large, or <tier>@<variant>")


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def register_ab(commands: Any) -> None:
    """Add ``llmq ab --a A --b B --cases FILE``, ``llmq ab promote`` and ``llmq ab show``."""
    ab = commands.add_parser(
        "ab",
        help="A/B quality gate: compare a variant with its tier on cases, then promote it",
        description="Send every case to A and to B through the queue (one block each, "
        "starting a worker for a variant when none is up), score the answers, and give "
        "the paired difference and a verdict: pass when the lower bound of B - A is above "
        "-THRESHOLD points, fail when the upper bound is below it, inconclusive otherwise.",
    )
    ab.add_argument("--a", type=_tier, help="the tier as it serves today (e.g. small)")
    ab.add_argument("--b", type=_tier, help="the variant to judge (e.g. small@bf16)")
    ab.add_argument(
        "--cases", type=Path, default=None, help="case file (JSONL; default: the bundled cases)"
    )
    ab.add_argument("--n", type=_positive, default=None, help="only the first N cases")
    ab.add_argument(
        "--threshold", type=float, default=3.0, help="points B may lose at most (default 3)"
    )
    ab.add_argument(
        "--max-tokens", type=_positive, default=None, help="answer budget for every case"
    )
    ab.add_argument("--b-max-tokens", type=_positive, default=None, help="answer budget of B alone")
    ab.add_argument(
        "--concurrency", type=_positive, default=4, help="jobs in flight per block (default 4)"
    )
    ab.add_argument(
        "--no-spawn",
        action="store_true",
        help="never start workers; fail when a variant has no warm worker",
    )
    ab.add_argument("--json", action="store_true", help="print the report as JSON")
    ab.set_defaults(handler=_run)
    actions = ab.add_subparsers(title="actions", metavar="ACTION")
    promote = actions.add_parser(
        "promote", help="make a variant what its tier serves (its last gate must have passed)"
    )
    promote.add_argument("variant", type=_tier, help="e.g. small@bf16 (a base tier: undo)")
    promote.add_argument("--force", action="store_true", help="promote without a passing gate")
    promote.add_argument("--reason", default=None, help="why (required with --force)")
    promote.add_argument("--by", default=None, help="who decides (default: the login name)")
    promote.set_defaults(handler=_promote)
    live = actions.add_parser(
        "live",
        help="shadow a share of a tier's finished requests to a variant; the running verdict",
    )
    live.add_argument("variant", type=_tier, help="e.g. small@bf16")
    live.add_argument(
        "--share", type=float, default=0.05, help="fraction of the tier's jobs shadowed (0.05)"
    )
    live.add_argument(
        "--follow",
        type=float,
        default=None,
        metavar="SECONDS",
        help="keep shadowing and reporting every SECONDS (Ctrl-C stops)",
    )
    live.add_argument("--json", action="store_true")
    live.set_defaults(handler=_live)
    show = actions.add_parser("show", help="what each tier serves, and the last gate runs")
    show.add_argument("--json", action="store_true")
    show.set_defaults(handler=_show)


def _sessions() -> Any:
    from schemas.db import make_engine, make_sessions
    from schemas.settings import Settings

    settings = Settings.from_env()
    return settings, make_sessions(make_engine(settings.database_url))


def _run(args: argparse.Namespace) -> int:
    from producer.quality.cases import load_cases
    from producer.quality.gate import GateOptions, cases_source, run_gate, store_run
    from producer.quality.report import render_report
    from schemas.errors import InvalidRequest

    if args.a is None or args.b is None:
        raise InvalidRequest("name both variants: llmq ab --a small --b small@VARIANT")
    settings, sessions = _sessions()
    cases = load_cases(args.cases)
    options = GateOptions(
        a=args.a,
        b=args.b,
        n=args.n,
        max_tokens=args.max_tokens,
        b_max_tokens=args.b_max_tokens,
        concurrency=args.concurrency,
        threshold_points=args.threshold,
        spawn="never" if args.no_spawn else "auto",
    )
    report = run_gate(
        settings, cases, options, source=cases_source(args.cases, cases[: args.n or None])
    )
    run_id = store_run(sessions, report)
    if args.json:
        print(json.dumps({"run_id": run_id, **report.model_dump(mode="json")}))
    else:
        print(render_report(report))
        print(f"stored as gate run {run_id}")
    return {"pass": 0, "fail": 1, "inconclusive": 2}[report.gate.verdict]


def _promote(args: argparse.Namespace) -> int:
    from producer.quality.gate import promote

    settings, sessions = _sessions()
    done = promote(
        settings, sessions, args.variant, force=args.force, reason=args.reason, promoted_by=args.by
    )
    if not done.variant.is_variant:
        print(f"{done.tier} serves its own configuration again")
    else:
        how = "forced" if done.forced else f"gate run {done.ab_run_id} passed"
        print(f"{done.tier} now serves {done.variant} ({how}); restart {done.tier}'s workers")
    return 0


def _live(args: argparse.Namespace) -> int:
    import time

    from producer.client import Client
    from producer.quality.shadow import live_report, shadow_pass

    settings, sessions = _sessions()
    with Client(settings) as client:
        while True:
            sent = shadow_pass(client, sessions, args.variant, share=args.share)
            report = live_report(sessions, args.variant)
            gate = report.gate
            figures = {
                "variant": str(args.variant),
                "share": args.share,
                "sent": sent,
                "pairs": report.pairs,
                "pending": report.pending,
                "mean_similarity": report.mean_similarity,
                "agreement": report.agreement,
                "agreement_ci": [round(gate.b.low, 4), round(gate.b.high, 4)],
                "verdict": gate.verdict,
                "cases_needed": gate.cases_needed,
            }
            if args.json:
                print(json.dumps(figures), flush=True)
            else:
                agreement = "-" if report.agreement is None else f"{100 * report.agreement:.1f}%"
                print(
                    f"{args.variant}: {sent} sent, {report.pairs} pairs scored, "
                    f"{report.pending} waiting; agreement {agreement}; {gate.verdict}",
                    flush=True,
                )
            if args.follow is None:
                return 0
            time.sleep(args.follow)


def _show(args: argparse.Namespace) -> int:
    from sqlalchemy import select

    from producer.quality.gate import serving
    from schemas.tables import AbRun

    _settings, sessions = _sessions()
    tiers = {}
    for tier in Tier:
        row = serving(sessions, tier)
        tiers[tier.value] = (
            None
            if row is None or row.variant == tier.value
            else {
                "variant": row.variant,
                "forced": row.forced,
                "reason": row.reason,
                "promoted_by": row.promoted_by,
                "at": row.created_at.isoformat(),
            }
        )
    with sessions() as session:
        runs = session.scalars(select(AbRun).order_by(AbRun.created_at.desc()).limit(10)).all()
        recent = [
            {
                "id": r.id,
                "a": r.a,
                "b": r.b,
                "n": r.n,
                "verdict": r.verdict,
                "delta": r.report.get("gate", {}).get("delta"),
                "at": r.created_at.isoformat(),
            }
            for r in runs
        ]
    if args.json:
        print(json.dumps({"serving": tiers, "runs": recent}))
        return 0
    for name, promoted in tiers.items():
        print(f"{name:<7} serves {promoted['variant'] if promoted else 'its own configuration'}")
    for run in recent:
        delta = run["delta"] or {}
        print(
            f"{run['at'][:19]}  {run['a']} vs {run['b']}  n={run['n']}  "
            f"B-A {100 * delta.get('value', 0):+.1f} points  {run['verdict']}"
        )
    return 0
