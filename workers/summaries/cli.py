"""``llmq summarize`` (run a night now) and ``llmq beat`` (the nightly schedule)."""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable
from datetime import date
from typing import Any

from schemas.progress import ProgressBar
from workers.summaries.night import Progress


def register_summarize(commands: Any) -> None:
    """Add ``llmq summarize --date YYYY-MM-DD [--conversation ID] [--dry-run]``."""
    summarize = commands.add_parser("summarize", help="run a night of conversation summaries now")
    summarize.add_argument("--date", required=True, type=date.fromisoformat, help="YYYY-MM-DD")
    summarize.add_argument("--conversation", default=None, help="only this conversation id")
    summarize.add_argument("--dry-run", action="store_true", help="list what it would do")
    summarize.add_argument("--timeout", type=float, default=None, help="stop waiting after s")
    summarize.add_argument("--json", action="store_true", help="print the final record as JSON")
    summarize.set_defaults(handler=_summarize)


def register_beat(commands: Any) -> None:
    """Add ``llmq beat``."""
    beat = commands.add_parser(
        "beat", help="run the nightly summary schedule (LLMQ_SUMMARY_CRON, _TIMEZONE)"
    )
    beat.set_defaults(handler=_beat)


def _beat(_args: argparse.Namespace) -> int:
    from schemas.settings import Settings
    from workers.summaries.beat import run_beat

    settings = Settings.from_env()
    return run_beat(settings, loglevel=settings.log_level)


def _summarize(args: argparse.Namespace) -> int:
    from producer.client import Client
    from schemas.settings import Settings
    from workers.summaries.night import NightRunner

    settings = Settings.from_env()
    with Client(settings) as client:
        runner = NightRunner(settings, client)
        if args.dry_run:
            plan = runner.plan(args.date, conversation=args.conversation)
            for candidate, action in plan:
                steps = runner.chunks_for(candidate, args.date)
                shape = "one job" if steps == 1 else f"map-reduce, {steps} chunks"
                owner = candidate.owner or "-"
                print(
                    f"{action.value:<6} {owner:<32} {candidate.conversation_id}  "
                    f"{candidate.turns} turns, {shape}"
                )
            print(f"{len(plan)} conversation(s) on {args.date}; nothing was sent", file=sys.stderr)
            return 0
        with ProgressBar(f"summaries of {args.date}", unit="conversations") as bar:
            report = runner.run(
                args.date,
                conversation=args.conversation,
                progress=summary_bar(bar),
                timeout_s=args.timeout,
            )
    record = {
        "day": report.day.isoformat(),
        "done": report.done,
        "failed": report.failed,
        "skipped": report.skipped,
        "remaining": report.remaining,
        "seconds": round(report.seconds, 1),
        "failures": report.failures,
    }
    if args.json:
        print(json.dumps(record))
    else:
        print(
            f"summaries of {record['day']}: {report.done} done, {report.failed} failed, "
            f"{report.skipped} skipped, {report.remaining} remaining in {report.seconds:.1f} s"
        )
        for conversation, error in report.failures.items():
            print(f"  failed {conversation}: {error}")
    return 1 if report.failed or report.remaining else 0


def summary_bar(bar: ProgressBar) -> Callable[[Progress], None]:
    """The night's counts drawn on the shared progress bar: ended of all, failures noted."""

    def draw(progress: Progress) -> None:
        bar.total = progress.done + progress.failed + progress.remaining
        bar.update(progress.done + progress.failed, note=f"{progress.failed} failed")

    return draw
