"""``llmq bench report``: run the benchmark suite (or reuse its JSON) and draw a page.

Each benchmark's result is saved as ``<out>/<bench>.json``; a result already there is
reused, so a long benchmark is never rerun for a new page (delete the file to rerun
it). The page, ``<out>/report.html``, has the machine at the top, one table of every
figure beside its goal (met or not), then one PNG plot per story (matplotlib, headless).
"""

from __future__ import annotations

import contextlib
import html
import json
import os
import platform
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from functools import partial
from pathlib import Path
from typing import TYPE_CHECKING, Any

from bench.fault_counts import FAULT_ZERO_KEYS
from schemas.queues import Tier
from schemas.settings import Settings

if TYPE_CHECKING:
    from bench.report_plots import Figure

Result = dict[str, Any]
BenchRunner = Callable[[Settings, str, dict[str, Any], Tier], Result]
"""Runs the benchmark named, with its defaults updated by the values given, on the tier
given where it runs an engine (``bench.cli.run_with_defaults``)."""

# Smaller samples for --quick: the whole suite in under ten minutes on a 2-core CPU.
# Engine and worker starts are most of that time, so the quick suite runs in an order
# where the benches share what they start (bench.harness.shared_starts): gateway's
# worker serves overhead's queued side; overhead's direct engine serves batching's
# direct side; and one worker serves batching's queued side, batch, priority and
# warm's warm side. Four starts in all (warm's cold side needs an engine of its own).
QUICK: dict[str, dict[str, Any]] = {
    # TTFT needs one token; each further token is a second or so of a slow CPU host.
    "gateway": {"samples": 10, "max_tokens": 2},
    "overhead": {"samples": 10, "blocks": 1, "max_tokens": 8},
    # The whole 1-16 sweep, one round, each slot sending one request per level.
    "batching": {"rounds": 1, "waves": 1, "max_tokens": 16},
    "batch": {"requests": 40, "samples": 8},
    # A p99 needs 100 samples (the bench refuses fewer); the flood is what shrinks.
    "priority": {"samples": 100, "batch_jobs": 100, "concurrency": 16, "max_tokens": 2},
    "warm": {"max_tokens": 2},
    "classifier": {"samples": 200, "baseline_samples": 40},
    # The measured run starts a worker for each of the three tiers (minutes here), the
    # local profile an engine: quick simulates on the GPU profile only, and says so.
    "routing": {"requests": 500, "measured_cases": 0, "local_profile": 0},
}
# The benches that may reuse the worker or engine the bench before them left running.
SHARE_A_WORKER = frozenset({"gateway", "overhead", "batching", "batch", "priority", "warm"})
# The suite, in run order (the page has its own). faults and peer run minutes even when
# small; they join a full run and are drawn whenever their JSON is in the folder.
FULL_SUITE = (*QUICK, "peer", "faults")


@dataclass(frozen=True)
class Goal:
    """One figure beside its goal: ``bench.key`` compared with ``target``."""

    bench: str
    key: str
    label: str
    op: str  # "<=", ">=" or "=="
    target: float

    def judge(self, results: dict[str, Result]) -> tuple[Any, bool | None]:
        """The measured value and whether it meets the goal (None: not measured)."""
        value = results.get(self.bench, {}).get(self.key)
        if not isinstance(value, int | float):
            return None, None
        met = {
            "<=": value <= self.target,
            ">=": value >= self.target,
            "==": value == self.target,
        }[self.op]
        return value, bool(met)

    def interval(self, results: dict[str, Result]) -> tuple[float, float] | None:
        """The figure's 95% interval (``<key>_ci95``, ``bench.spread``), where it has one."""
        bounds = results.get(self.bench, {}).get(f"{self.key}_ci95")
        if not isinstance(bounds, list) or len(bounds) != 2:
            return None
        return float(bounds[0]), float(bounds[1])

    def within_noise(self, results: dict[str, Result]) -> bool:
        """True when the figure's interval reaches both sides of the target: one run
        cannot tell whether the goal is met."""
        bounds = self.interval(results)
        if bounds is None or self.op == "==":
            return False
        return bounds[0] <= self.target <= bounds[1]


GOALS = (
    Goal("overhead", "added_ms_p50", "queue path adds to TTFT (p50, ms)", "<=", 3),
    Goal("overhead", "added_itl_ms_p50", "queue path adds per token (p50, ms)", "<=", 0.3),
    Goal("gateway", "added_ms_p50", "gateway adds to TTFT over the client (p50, ms)", "<=", 5),
    Goal("peer", "ttft_ratio", "TTFT, llmq gateway / vLLM server", "<=", 1.05),
    Goal("peer", "total_ratio", "64-token total, llmq / vLLM", "<=", 1.03),
    Goal("peer", "throughput_ratio", "16-way tokens/s, llmq / vLLM", ">=", 0.97),
    Goal("warm", "ratio", "cold / warm TTFT, 2k system prompt", ">=", 8),
    Goal("warm", "first_penalty", "first warm request / next 20 (p50)", "<=", 1.2),
    Goal(
        "warm",
        "first_logprobs_penalty",
        "first request with log probabilities / next 5 (p50)",
        "<=",
        1.2,
    ),
    # A ratio to idle is met by starving batch: the goal is the SLO, batch beside it.
    Goal("priority", "loaded_slo_attainment", "interactive within SLO under flood", ">=", 0.99),
    Goal("batch", "speedup", "batch alone over one-at-a-time (req/s)", ">=", 5),
    Goal("batch", "interactive_ttft_ratio", "interactive p50 during batch / idle", "<=", 1.5),
    Goal("mixed", "llmq_slo_attainment", "mixed day: interactive within SLO, llmq", ">=", 0.99),
    Goal(
        "mixed",
        "goodput_ratio_vs_vllm_priority",
        "mixed day: batch goodput, llmq / vLLM with request priority",
        ">=",
        0.9,
    ),
    Goal("classifier", "p50_ms", "classifier latency p50 (ms)", "<=", 5),
    Goal("classifier", "p99_ms", "classifier latency p99 (ms)", "<=", 10),
    Goal("routing", "ratio", "routed / all-large mean latency (simulated)", "<=", 1),
    *(Goal("faults", key, f"faults: {key.replace('_', ' ')}", "==", 0) for key in FAULT_ZERO_KEYS),
    Goal("abuse", "worst_phase_p99_ratio", "interactive p99, worst attack / idle", "<=", 1.5),
    Goal("abuse", "http_5xx", "abuse: 5xx answers to anyone", "==", 0),
    Goal("abuse", "valid_key_refusals", "abuse: valid keys refused", "==", 0),
    Goal("abuse", "stuck_running", "abuse: rows left running", "==", 0),
)


def run_report(
    settings: Settings,
    *,
    out: Path,
    quick: bool = False,
    tier: Tier = Tier.SMALL,
    benches: Sequence[str] | None = None,
    run: BenchRunner | None = None,
    progress: Callable[[str], None] = print,
) -> Path:
    """Run what is missing in ``out`` (with ``run``), then write ``out/report.html``;
    return its path.

    A benchmark that fails is noted on the page and in ``<bench>.error.txt``; the
    others still run.
    """
    from bench.harness import shared_starts

    out.mkdir(parents=True, exist_ok=True)
    names = list(benches or (tuple(QUICK) if quick else FULL_SUITE))
    with shared_starts() if quick else contextlib.nullcontext():
        _run_missing(settings, names, out=out, quick=quick, tier=tier, run=run, progress=progress)
    page = build_report(out, machine=machine_details(settings, tier))
    progress(f"report: {page}")
    return page


def _run_missing(
    settings: Settings,
    names: list[str],
    *,
    out: Path,
    quick: bool,
    tier: Tier,
    run: BenchRunner | None,
    progress: Callable[[str], None],
) -> None:
    from bench.harness import release_held

    for index, name in enumerate(names, 1):
        path = out / f"{name}.json"
        if path.is_file():
            progress(f"[{index}/{len(names)}] {name}: reusing {path.name}")
            continue
        progress(f"[{index}/{len(names)}] {name}: running{' (quick)' if quick else ''}...")
        if name not in SHARE_A_WORKER:
            release_held()  # it starts engines of its own
        started = time.monotonic()
        try:
            result = run_one(settings, name, quick=quick, tier=tier, run=run)
        except Exception as exc:  # noqa: BLE001 - one broken bench must not stop the page
            (out / f"{name}.error.txt").write_text(traceback.format_exc())
            progress(f"[{index}/{len(names)}] {name}: failed ({exc.__class__.__name__}: {exc})")
            continue
        result["quick"] = quick
        path.write_text(json.dumps(result, indent=1) + "\n")
        progress(f"[{index}/{len(names)}] {name}: done in {time.monotonic() - started:.0f} s")


def run_one(
    settings: Settings, name: str, *, quick: bool, tier: Tier, run: BenchRunner | None
) -> Result:
    """One benchmark, by ``run``, with its defaults (smaller if quick)."""
    if run is None:
        raise RuntimeError("no benchmark table to run from: use llmq bench report")
    return run(settings, name, dict(QUICK.get(name, {})) if quick else {}, tier)


def machine_details(settings: Settings, tier: Tier) -> dict[str, str]:
    """CPU, cores, memory, model and engine settings: the page's first lines."""
    config = settings.tier(tier)
    details = {
        "CPU": _cpu_name(),
        "cores": str(os.cpu_count()),
        "memory": _memory(),
        "OS": f"{platform.system()} {platform.release()}",
        "Python": platform.python_version(),
        "tier": tier.value,
        "model": config.model,
    }
    engine = config.model_dump(mode="json", exclude={"model"})
    details["engine settings"] = ", ".join(f"{k}={v}" for k, v in sorted(engine.items()))
    return details


def _cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or "unknown"


def _memory() -> str:
    try:
        for line in Path("/proc/meminfo").read_text().splitlines():
            if line.startswith("MemTotal"):
                return f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB"
    except OSError:
        pass
    return "unknown"


# ---------------------------------------------------------------- the page


def load_results(out: Path) -> dict[str, Result]:
    """Every ``<bench>.json`` in ``out`` (a bench's JSON last line, or the whole file)."""
    results: dict[str, Result] = {}
    for path in sorted(out.glob("*.json")):
        if path.name == "machine.json":
            continue
        text = path.read_text().strip()
        try:
            data = json.loads(text)
        except ValueError:
            # The printed output of `llmq bench NAME`: the JSON is the last line.
            data = json.loads(text.splitlines()[-1])
        if isinstance(data, dict):
            results[str(data.get("bench", path.stem))] = data
    return results


def build_report(out: Path, *, machine: dict[str, str] | None = None) -> Path:
    """Draw the plots for the results in ``out`` and write ``out/report.html``."""
    from bench import report_plots

    results = load_results(out)
    machine_file = out / "machine.json"
    if machine is not None:
        machine_file.write_text(json.dumps(machine, indent=1) + "\n")
    elif machine_file.is_file():
        machine = json.loads(machine_file.read_text())
    else:
        machine = {"machine": "not recorded (results reused from another run)"}
    quick = any(r.get("quick") for r in results.values())
    figures = report_plots.draw_all(results, out)
    errors = {p.stem.removesuffix(".error"): p.name for p in sorted(out.glob("*.error.txt"))}
    page = out / "report.html"
    page.write_text(_html(results, figures, machine or {}, quick=quick, errors=errors))
    return page


def _html(
    results: dict[str, Result],
    figures: list[Figure],
    machine: dict[str, str],
    *,
    quick: bool,
    errors: dict[str, str],
) -> str:
    e = html.escape
    rows = []
    for goal in GOALS:
        value, met = goal.judge(results)
        if met is None and goal.bench not in results:
            continue
        mark = {True: ("met", "met"), False: ("not met", "miss"), None: ("not measured", "na")}
        text, css = mark[met]
        if met is not None and goal.within_noise(results):
            text += " (within noise)"
        shown = "-" if value is None else f"{value:g}"
        bounds = goal.interval(results)
        if bounds is not None:
            shown += f" [{bounds[0]:g}, {bounds[1]:g}]"
        rows.append(
            f"<tr class='{css}'><td>{e(goal.bench)}</td><td>{e(goal.label)}</td>"
            f"<td><code>{e(goal.key)}</code></td><td class='num'>{e(shown)}</td>"
            f"<td class='num'>{e(goal.op)} {goal.target:g}</td><td>{text}</td></tr>"
        )
    met_count = sum(1 for g in GOALS if g.judge(results)[1])
    judged = sum(1 for g in GOALS if g.judge(results)[1] is not None)
    sections = []
    toc = []
    for fig in figures:
        toc.append(f"<li><a href='#{fig.anchor}'>{e(fig.title)}</a></li>")
        sections.append(
            f"<section id='{fig.anchor}'><h2>{e(fig.title)}</h2>"
            f"<img src='{e(fig.file)}' alt='{e(fig.title)}' width='900'>"
            f"<p>{e(fig.caption)}</p></section>"
        )
    machine_rows = "".join(
        f"<tr><th>{e(k)}</th><td>{e(str(v))}</td></tr>" for k, v in machine.items()
    )
    failed = "".join(
        f"<li>{e(name)}: failed, see <a href='{e(file)}'>{e(file)}</a></li>"
        for name, file in errors.items()
        if name not in results
    )
    quick_note = (
        "<p class='quick'><strong>Quick run:</strong> smaller samples than the full suite "
        "(<code>llmq bench report --quick</code>); tails (p95/p99) are rough.</p>"
        if quick
        else ""
    )
    missing = [n for n in FULL_SUITE if n not in results]
    missing_note = (
        f"<p class='na'>Not in this report: {e(', '.join(missing))} "
        "(run <code>llmq bench report</code> without <code>--quick</code>, "
        "or drop their JSON into the folder).</p>"
        if missing
        else ""
    )
    return f"""<!doctype html>
<html lang="en"><head><meta charset="utf-8"><title>llmq benchmark report</title>
<style>
body {{ font-family: system-ui, sans-serif; max-width: 960px; margin: 2em auto; color: #222; }}
table {{ border-collapse: collapse; margin: 1em 0; }}
td, th {{ border-bottom: 1px solid #ddd; padding: 4px 10px; text-align: left; }}
td.num {{ text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }}
tr.met td:last-child {{ color: #1a7f37; font-weight: bold; }}
tr.miss td:last-child {{ color: #cf222e; font-weight: bold; }}
.na {{ color: #777; }}
.quick {{ background: #fff8c5; padding: 8px; border-left: 4px solid #d4a72c; }}
img {{ max-width: 100%; height: auto; }}
</style></head><body>
<h1>llmq benchmark report</h1>
<p>Generated {e(time.strftime("%Y-%m-%d %H:%M"))} by <code>llmq bench report</code>.</p>
{quick_note}
<h2 id="machine">Machine</h2>
<table>{machine_rows}</table>
<h2 id="goals">Figures and goals ({met_count} of {judged} met)</h2>
<table><tr><th>bench</th><th>figure</th><th>key</th><th>measured [95% interval]</th>
<th>goal</th><th></th></tr>
{"".join(rows)}</table>
<p>An interval is the bench's samples resampled (<code>bench/spread.py</code>); a goal
whose target lies inside its figure's interval is marked within noise: one run does
not settle it.</p>
{missing_note}
{f"<ul>{failed}</ul>" if failed else ""}
<h2>Plots</h2><ul>{"".join(toc)}</ul>
{"".join(sections)}
<script>
// Marks the page once loaded: every plot drawn, or which did not load (checked by tests).
window.addEventListener("load", () => {{
  const bad = [...document.images].filter((i) => !i.complete || i.naturalWidth === 0);
  const names = bad.map((i) => i.alt).join(", ");
  document.body.dataset.plots = bad.length ? "missing " + names : "loaded";
}});
</script>
</body></html>
"""


def register_report(bench_commands: Any, run: BenchRunner) -> None:
    """Add ``llmq bench report [--out DIR] [--quick] [--tier T] [--only A,B]``, which
    runs each benchmark with ``run``."""
    parser = bench_commands.add_parser(
        "report",
        help="run the suite (or reuse DIR's JSON) and write DIR/report.html with plots",
        description=__doc__,
    )
    parser.add_argument(
        "--out", type=Path, default=Path("bench-report"), help="folder (default bench-report)"
    )
    parser.add_argument(
        "--quick", action="store_true", help="smaller samples: under ten minutes on a 2-core CPU"
    )
    parser.add_argument("--tier", default="small", choices=[t.value for t in Tier])
    parser.add_argument(
        "--only", default=None, help="comma-separated benches to run (default: the suite)"
    )
    parser.add_argument(
        "--no-run", action="store_true", help="draw from the JSON already in DIR; run nothing"
    )
    parser.set_defaults(handler=partial(_handle, run=run))


def _handle(args: Any, *, run: BenchRunner) -> int:
    out: Path = args.out
    if args.no_run:
        print(build_report(out))
        return 0
    run_report(
        Settings.from_env(),
        out=out,
        quick=args.quick,
        tier=Tier(args.tier),
        benches=args.only.split(",") if args.only else None,
        run=run,
    )
    return 0
