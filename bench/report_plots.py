"""The report's plots: one PNG per story, drawn from the benches' JSON (headless)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")  # no display: files only

import matplotlib.pyplot as plt
import numpy as np
from matplotlib.axes import Axes

from bench.fault_counts import FAULT_ZERO_KEYS

Result = dict[str, Any]
DPI = 100
COLORS = {"direct": "#6e7781", "queued": "#0969da", "gateway": "#8250df", "vllm": "#cf222e"}


@dataclass(frozen=True)
class Figure:
    """One drawn plot: its anchor on the page, title, PNG file name and caption."""

    anchor: str
    title: str
    file: str
    caption: str


def draw_all(results: dict[str, Result], out: Path) -> list[Figure]:
    """Every plot the results allow, saved in ``out``; a plot without data is skipped."""
    figures = []
    for draw in DRAWERS:
        figure = draw(results, out)
        if figure is not None:
            figures.append(figure)
        plt.close("all")
    return figures


def _save(fig: Any, out: Path, anchor: str, title: str, caption: str) -> Figure:
    file = f"{anchor}.png"
    fig.suptitle(title, fontsize=12)
    fig.tight_layout()
    fig.savefig(out / file, dpi=DPI)
    return Figure(anchor, title, file, caption)


def _cdf(ax: Axes, samples: Sequence[float], label: str, color: str | None) -> None:
    values = np.sort(np.asarray(samples, dtype=float))
    share = np.arange(1, len(values) + 1) / len(values)
    ax.step(values, share, where="post", label=f"{label} (n={len(values)})", color=color)


def _bars(ax: Axes, labels: list[str], values: list[float], colors: list[str], unit: str) -> None:
    bars = ax.bar(labels, values, color=colors)
    ax.bar_label(bars, labels=[f"{_num(v)} {unit}".strip() for v in values], padding=2)
    ax.set_ylim(0, max(values) * 1.2 if values and max(values) > 0 else 1)


def _num(value: float) -> str:
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.3g}"


def ttft_distributions(results: dict[str, Result], out: Path) -> Figure | None:
    """TTFT CDFs: direct engine, queued, gateway, vLLM's own server (when measured)."""
    series: list[tuple[str, list[float], str | None]] = []
    overhead, gateway, peer = (results.get(k, {}) for k in ("overhead", "gateway", "peer"))
    for label, source, key, color in (
        ("engine in-process", overhead, "direct_ttft_samples_ms", COLORS["direct"]),
        ("llmq queue path (client)", overhead, "queued_ttft_samples_ms", COLORS["queued"]),
        ("llmq gateway (HTTP)", gateway, "gateway_ttft_samples_ms", COLORS["gateway"]),
        ("vLLM's own server (peer)", peer, "vllm_ttft_samples_ms", COLORS["vllm"]),
        ("llmq gateway (peer, SDK)", peer, "llmq_ttft_samples_ms", "#1a7f37"),
    ):
        if source.get(key):
            series.append((label, source[key], color))
    if not series:
        return None
    fig, ax = plt.subplots(figsize=(9, 4.5))
    for name, samples, shade in series:
        _cdf(ax, samples, name, shade)
    ax.set_xlabel("time to first token (ms)")
    ax.set_ylabel("share of requests at or below")
    ax.set_ylim(0, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(loc="lower right")
    return _save(
        fig,
        out,
        "ttft",
        "Time to first token, by path",
        "Cumulative distribution of TTFT: further left is faster, a steep curve is "
        "consistent. The gap between the engine in-process and the queue path is what "
        "llmq adds.",
    )


def interactive_under_load(results: dict[str, Result], out: Path) -> Figure | None:
    """Interactive TTFT idle vs under a batch flood (priority) and during a batch (batch)."""
    priority, batch = results.get("priority"), results.get("batch")
    if not priority and not batch:
        return None
    panels = int(bool(priority)) + int(bool(batch))
    fig, axes = plt.subplots(1, panels, figsize=(9, 4), squeeze=False)
    index = 0
    if priority:
        ax = axes[0][index]
        index += 1
        quantiles = ["p50", "p95", "p99"]
        idle = [float(priority.get(f"idle_ttft_{q}_ms", 0)) for q in quantiles]
        loaded = [float(priority.get(f"loaded_ttft_{q}_ms", 0)) for q in quantiles]
        x = np.arange(len(quantiles))
        a = ax.bar(x - 0.2, idle, 0.4, label="idle worker", color=COLORS["direct"])
        b = ax.bar(x + 0.2, loaded, 0.4, label="batch flood queued", color=COLORS["queued"])
        ax.bar_label(a, fmt="%.0f", padding=2)
        ax.bar_label(b, fmt="%.0f", padding=2)
        ax.set_xticks(x, quantiles)
        ax.set_ylabel("interactive TTFT (ms)")
        ax.set_title(f"{priority.get('batch_jobs', '?')} batch jobs queued", fontsize=10)
        ax.legend()
    if batch:
        ax = axes[0][index]
        values = [
            float(batch.get("interactive_ttft_p50_ms", 0)),
            float(batch.get("interactive_ttft_p50_during_batch_ms", 0)),
        ]
        _bars(ax, ["idle", "during a batch"], values, [COLORS["direct"], COLORS["queued"]], "ms")
        ax.set_ylabel("interactive TTFT p50 (ms)")
        ax.set_title(f"Batch API, {batch.get('requests', '?')} requests", fontsize=10)
    return _save(
        fig,
        out,
        "interactive-under-load",
        "Interactive latency: idle vs under batch load",
        "Interactive requests should barely notice batch work: the bars on the right of "
        "each pair should be close to the ones on the left (goal: at most 1.5x).",
    )


def cold_vs_warm(results: dict[str, Result], out: Path) -> Figure | None:
    warm = results.get("warm")
    if not warm:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = ["cold engine", "first on warm worker", "next 20 (p50)"]
    values = [
        float(warm.get("cold_ttft_ms", 0)),
        float(warm.get("warm_ttft_ms", 0)),
        float(warm.get("next_20_ttft_ms_p50", 0)),
    ]
    _bars(ax, labels, values, [COLORS["vllm"], COLORS["queued"], COLORS["direct"]], "ms")
    ax.set_yscale("log")
    ax.set_ylim(max(min(values) / 2, 0.1), max(values) * 3)
    ax.set_ylabel("TTFT (ms, log scale)")
    tokens = warm.get("system_prompt_tokens") or warm.get("prompt_tokens_first")
    return _save(
        fig,
        out,
        "cold-warm",
        "Cold vs warm, with the ~2k-token system prompt",
        f"A worker prefills its system prompts ({tokens} tokens) before it takes work, so "
        f"the first real request is a prefix-cache hit: {warm.get('ratio', '?')}x faster "
        "than on a cold engine.",
    )


def throughput(results: dict[str, Result], out: Path) -> Figure | None:
    """Tokens/s vs requests at once, direct and queued (the sweep); bars for older JSON."""
    batching = results.get("batching")
    if not batching:
        return None
    if batching.get("levels"):
        return _throughput_sweep(batching, out)
    n = batching.get("concurrency", 16)
    labels = ["direct, 1 at a time", f"direct, {n} at once", f"queued, {n} at once"]
    values = [
        float(batching.get("direct_tok_s_1", 0)),
        float(batching.get(f"direct_tok_s_{n}", 0)),
        float(batching.get(f"queued_tok_s_{n}", 0)),
    ]
    fig, ax = plt.subplots(figsize=(7, 4))
    _bars(ax, labels, values, [COLORS["direct"], COLORS["direct"], COLORS["queued"]], "tok/s")
    ax.set_ylabel("output tokens per second")
    return _save(
        fig,
        out,
        "throughput",
        "Throughput: continuous batching, direct vs through the queue",
        f"Concurrent requests share the engine's steps. Through the queue llmq keeps "
        f"{batching.get('queued_over_direct', '?')} of the direct engine's throughput at "
        f"{n} at once. (This result has no sweep over 2, 4 and 8: rerun llmq bench batching.)",
    )


def _throughput_sweep(batching: Result, out: Path) -> Figure:
    levels = [int(x) for x in batching["levels"]]
    direct = [float(x) for x in batching.get("direct_tok_s_by_level", [])]
    queued = [float(x) for x in batching.get("queued_tok_s_by_level", [])]
    fig, (left, right) = plt.subplots(1, 2, figsize=(10, 4.2), gridspec_kw={"width_ratios": [3, 2]})
    # Labels above the direct line and below the queued one: the two often run close.
    for name, values, color, marker, (offset, align) in (
        ("direct engine", direct, COLORS["direct"], "s", (7, "bottom")),
        ("through the queue", queued, COLORS["queued"], "o", (-7, "top")),
    ):
        if len(values) != len(levels):
            continue
        left.plot(levels, values, marker=marker, color=color, label=name)
        for level, value in zip(levels, values, strict=True):
            left.annotate(
                _num(value),
                (level, value),
                textcoords="offset points",
                xytext=(0, offset),
                ha="center",
                va=align,
                fontsize=8,
                color=color,
            )
    left.set_xscale("log", base=2)
    left.set_xticks(levels, [str(level) for level in levels])
    left.set_xlabel("requests at once")
    left.set_ylabel("output tokens per second")
    left.set_ylim(0, max([*direct, *queued, 1.0]) * 1.2)
    left.grid(alpha=0.3)
    left.legend(loc="upper left")
    if len(direct) == len(queued) == len(levels):
        ratios = [q / d if d else 0.0 for q, d in zip(queued, direct, strict=True)]
        bars = right.bar([str(level) for level in levels], ratios, color=COLORS["queued"])
        right.bar_label(bars, labels=[f"{r:.2f}" for r in ratios], padding=2, fontsize=8)
        right.axhline(1.0, color=COLORS["direct"], linestyle="--", linewidth=1)
        right.set_ylim(0, max([*ratios, 1.0]) * 1.2)
    right.set_xlabel("requests at once")
    right.set_ylabel("queued / direct tokens/s")
    right.set_title("what the queue keeps of the engine's throughput", fontsize=10)
    requests = batching.get("requests_per_level") or levels
    rounds = batching.get("rounds", "?")
    rounds_text = f"{rounds} round{'' if rounds == 1 else 's'}"
    per_level = ", ".join(map(str, requests))
    sample = (
        f"Quick run: {rounds_text}, {per_level} requests per level (one per in-flight "
        "slot): rough figures."
        if batching.get("quick")
        else f"Median of {rounds_text}; {per_level} requests per level."
    )
    speedup = direct[-1] / direct[0] if direct and direct[0] else None
    return _save(
        fig,
        out,
        "throughput",
        "Throughput vs concurrency, direct vs through the queue",
        f"Concurrent requests share the engine's steps (continuous batching): at "
        f"{levels[-1]} at once the engine makes "
        f"{'?' if speedup is None else f'{speedup:.1f}x'} the tokens/s of one request. "
        f"Right: the share the queue path keeps at each level (1.0: all of it). {sample} "
        f"{batching.get('max_tokens', '?')} tokens per answer, {batching.get('tier', '?')} tier.",
    )


def classifier(results: dict[str, Result], out: Path) -> Figure | None:
    """The router's confusion matrix on its held-out requests, and its latency per decision."""
    result = results.get("classifier")
    if not result:
        return None
    confusion = result.get("confusion")
    panels = 2 if confusion else 1
    fig, axes = plt.subplots(1, panels, figsize=(10 if confusion else 7, 4.4), squeeze=False)
    if confusion:
        _confusion(axes[0][0], confusion, result.get("labels") or ["small", "medium", "large"])
        axes[0][0].set_title(
            f"{result.get('validation_examples', '?')} held-out requests, accuracy "
            f"{result.get('accuracy', '?')}",
            fontsize=10,
        )
    _classifier_latency(axes[0][panels - 1], result)
    n = result.get("n", "?")
    return _save(
        fig,
        out,
        "classifier",
        "Classifier: confusion on held-out requests, latency per decision",
        "Left: the tier the router picks (classifier plus policy) for each labelled request "
        "of the validation split it never trained on; rows are the labelled tier, columns "
        "the routed one, each cell the count and its share of the row. Above the diagonal "
        "costs money (a bigger model than needed), below it costs quality. Right: the time "
        f"of one routing decision, embedding included, over {n} requests new to it, "
        "against the 5 ms budget.",
    )


def _confusion(ax: Axes, confusion: list[list[int]], labels: list[str]) -> None:
    counts = np.asarray(confusion, dtype=float)
    rows = counts.sum(axis=1, keepdims=True)
    shares = np.divide(counts, rows, out=np.zeros_like(counts), where=rows > 0)
    ax.imshow(shares, cmap="Blues", vmin=0, vmax=1)
    for (i, j), count in np.ndenumerate(counts):
        color = "white" if shares[i, j] > 0.6 else "#222"
        ax.text(j, i, f"{count:.0f}\n{shares[i, j]:.0%}", ha="center", va="center", color=color)
    ticks = range(len(labels))
    ax.set_xticks(ticks, labels)
    ax.set_yticks(ticks, labels)
    ax.set_xlabel("routed tier (predicted)")
    ax.set_ylabel("labelled tier")


def _classifier_latency(ax: Axes, result: Result) -> None:
    p50, p99 = float(result.get("p50_ms", 0)), float(result.get("p99_ms", 0))
    samples = result.get("latency_samples_ms")
    if samples:
        _cdf(ax, samples, "routing decision", COLORS["queued"])
        for value, name, style in ((p50, "p50", "-"), (p99, "p99", ":")):
            ax.axvline(value, color=COLORS["queued"], linestyle=style, linewidth=1)
            ax.annotate(
                f"{name} {value:.3g} ms",
                (value, 0.05 if name == "p50" else 0.15),
                textcoords="offset points",
                xytext=(4, 0),
                fontsize=8,
            )
        ax.axvline(5, color="#1a7f37", linestyle="--", linewidth=1, label="budget 5 ms")
        ax.set_xscale("log")
        ax.set_xlabel("ms per routing decision (log scale)")
        ax.set_ylabel("share of decisions at or below")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    else:
        labels, values = ["p50", "p99"], [p50, p99]
        _bars(ax, labels, values, [COLORS["queued"]] * 2, "ms")
        ax.axhline(5, color="#1a7f37", linestyle="--", linewidth=1, label="budget 5 ms")
        ax.set_ylabel("ms per routing decision")
    title = f"p50 {p50:.3g} ms, p99 {p99:.3g} ms"
    if "teacher_encode_p50_ms" in result:
        title += f" (full encoder: p50 {float(result['teacher_encode_p50_ms']):.3g} ms)"
    ax.set_title(title, fontsize=10)
    ax.legend(loc="center right")


def routing(results: dict[str, Result], out: Path) -> Figure | None:
    """Routed vs all-large mean latency: this host's real tiers (measured), the profiles
    (a simulated mix)."""
    result = results.get("routing")
    if not result:
        return None
    groups: list[tuple[str, float, float]] = []
    if result.get("measured_routed_mean_ms") is not None:
        groups.append(
            (
                f"this host's tiers\n(measured, {result.get('measured_cases', '?')} cases)",
                float(result["measured_routed_mean_ms"]),
                float(result.get("measured_all_large_mean_ms", 0)),
            )
        )
    for profile in result.get("profiles") or [result]:
        groups.append(
            (
                _measured_or_simulated(str(profile.get("profile", "profile"))),
                float(profile.get("routed_mean_ms", 0)),
                float(profile.get("all_large_mean_ms", 0)),
            )
        )
    fig, ax = plt.subplots(figsize=(9, 4.2))
    x = np.arange(len(groups))
    a = ax.bar(x - 0.2, [g[1] for g in groups], 0.4, label="routed", color=COLORS["queued"])
    b = ax.bar(x + 0.2, [g[2] for g in groups], 0.4, label="all to large", color=COLORS["vllm"])
    ax.bar_label(a, fmt="%.0f", padding=2)
    ax.bar_label(b, fmt="%.0f", padding=2)
    ax.set_xticks(x, [g[0] for g in groups], fontsize=8)
    ax.set_ylabel("mean request latency (ms)")
    ax.set_title(f"simulated relative cost {result.get('relative_cost', '?')}", fontsize=10)
    ax.legend()
    skipped = (
        ""
        if result.get("measured_routed_mean_ms") is not None
        else " This result has no measured run of this host's tiers (llmq bench routing "
        "--measured-cases 0, as --quick runs it)."
    )
    if "profiles" in result and result.get("local_profile") is None:
        skipped += (
            " Nor a simulation on this host's profile (--local-profile 0, as --quick runs it)."
        )
    return _save(
        fig,
        out,
        "routing",
        "Routing: routed vs all-large",
        "Mean latency of a mixed workload routed by the classifier vs everything on the "
        "large tier. Each group is labelled: measured (the shipped cases run on this host's "
        "real tiers, one engine at a time), or simulated (a drawn mix served at a latency "
        "profile: the local one measured on this machine's engine, the GPU one published "
        "figures)." + skipped,
    )


def _measured_or_simulated(name: str) -> str:
    # The local profile times this machine's engine (small; larger tiers scaled); the
    # others are published GPU figures: both drive the same simulated workload.
    if "local" in name:
        return f"{name}\n(measured here, simulated mix)"
    return f"{name}\n(GPU profile, simulated)"


def batch_throughput(results: dict[str, Result], out: Path) -> Figure | None:
    batch = results.get("batch")
    if not batch:
        return None
    fig, ax = plt.subplots(figsize=(7, 4))
    labels = ["one at a time", "one batch"]
    values = [float(batch.get("serial_req_s", 0)), float(batch.get("batch_req_s", 0))]
    colors = [COLORS["direct"], COLORS["queued"]]
    if "batch_req_s_while_interactive" in batch:
        labels.append("one batch, people waiting")
        values.append(float(batch["batch_req_s_while_interactive"]))
        colors.append(COLORS["queued"])
    _bars(ax, labels, values, colors, "/s")
    ax.set_ylabel("requests per second")
    return _save(
        fig,
        out,
        "batch",
        "Batch API: one batch vs one request at a time",
        f"{batch.get('requests', '?')} short requests; the batch keeps the engine full: "
        f"{batch.get('speedup', '?')}x the requests per second (goal: at least 5x); beside "
        "interactive requests it gives way, by design.",
    )


# The report's zero goals, plus the jobs a Sentinel failover round lost (plotted only).
FAULT_KEYS = (*FAULT_ZERO_KEYS, "failover_jobs_lost")


def faults(results: dict[str, Result], out: Path) -> Figure | None:
    lab = results.get("faults")
    if not lab:
        return None
    keys = [k for k in FAULT_KEYS if k in lab]
    values = [float(lab[k]) for k in keys]
    fig, ax = plt.subplots(figsize=(9, 4))
    colors = ["#cf222e" if v else "#1a7f37" for v in values]
    bars = ax.barh([k.replace("_", " ") for k in keys], [max(v, 0.05) for v in values])
    for bar, color in zip(bars, colors, strict=True):
        bar.set_color(color)
    ax.bar_label(bars, labels=[f"{v:g}" for v in values], padding=3)
    ax.set_xlim(0, max([*values, 1]) * 1.3)
    ax.invert_yaxis()
    ax.set_xlabel("count (every one must be 0)")
    return _save(
        fig,
        out,
        "faults",
        "Fault lab: what was lost",
        f"{lab.get('kills', '?')} workers killed holding work, a Redis restart, "
        f"{lab.get('fuzz_cases', '?')} bad inputs of each kind; green bars are zero.",
    )


DRAWERS: tuple[Callable[[dict[str, Result], Path], Figure | None], ...] = (
    ttft_distributions,
    interactive_under_load,
    cold_vs_warm,
    throughput,
    classifier,
    routing,
    batch_throughput,
    faults,
)
