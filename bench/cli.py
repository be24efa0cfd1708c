"""``llmq bench ...``: each benchmark prints one JSON object as its last stdout line,
with the ``host`` and the ``commit`` it ran on.

Every benchmark is one :class:`Bench` entry in :data:`BENCHES`: its name, what it
measures, its options, and the function that runs it. An option's ``dest`` is the
keyword that function takes, so a plain benchmark needs no adapter; the few whose
inputs need shaping (a plan object, a trained router) name a short runner here.
Benchmark modules are imported only when their command runs: ``llmq --help`` stays fast.
"""

from __future__ import annotations

import argparse
import importlib
import json
import os
import sys
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from schemas.progress import format_duration
from schemas.queues import Tier
from schemas.settings import Settings

if TYPE_CHECKING:
    from producer.router.classifier import DifficultyClassifier
    from producer.router.policy import PolicyConfig

Values = dict[str, Any]
Runner = Callable[[Settings, Values], dict[str, Any]]


@dataclass(frozen=True)
class Option:
    """One command-line option; ``dest`` is the keyword its value is passed as."""

    flags: tuple[str, ...]
    help: str
    default: Any = None
    type: Callable[[str], Any] = int
    dest: str | None = None
    switch: bool = False

    def add_to(self, parser: argparse.ArgumentParser) -> str:
        """Add the option to ``parser``; returns the name its value is stored under."""
        if self.switch:
            return parser.add_argument(*self.flags, action="store_true", help=self.help).dest
        settings: dict[str, Any] = {"type": self.type, "default": self.default, "help": self.help}
        if self.dest is not None:
            settings["dest"] = self.dest
            settings["metavar"] = self.flags[-1].removeprefix("--").replace("-", "_").upper()
        return parser.add_argument(*self.flags, **settings).dest


def opt(
    *flags: str,
    help: str,
    default: Any = None,
    type: Callable[[str], Any] = int,
    dest: str | None = None,
) -> Option:
    """An :class:`Option`; integer-valued unless ``type`` says otherwise."""
    return Option(flags, help, default, type, dest)


def switch(*flags: str, help: str) -> Option:
    """An on/off :class:`Option` (``store_true``): False unless given."""
    return Option(flags, help, default=False, switch=True)


@dataclass(frozen=True)
class Bench:
    """One ``llmq bench NAME`` command.

    ``run`` is ``"module:function"``, called as ``function(settings, **values)``, or a
    runner taking ``(settings, values)``. ``values`` holds every option by its ``dest``,
    and ``tier`` when the benchmark runs on an engine (``on_engine``: it gets ``--tier``).
    """

    name: str
    help: str
    run: str | Runner
    options: tuple[Option, ...] = ()
    on_engine: bool = True

    def runner(self) -> Runner:
        if not isinstance(self.run, str):
            return self.run
        module, _, function = self.run.partition(":")
        target = getattr(importlib.import_module(module), function)
        return lambda settings, values: dict(target(settings, **values))


def _peer(settings: Settings, values: Values) -> dict[str, Any]:
    from bench.peer import PeerPlan, run_peer

    tier = values.pop("tier")
    return run_peer(settings, tier=tier, plan=PeerPlan(**values))


def _names(text: str) -> tuple[str, ...]:
    return tuple(name.strip() for name in text.split(",") if name.strip())


def _rates(text: str) -> tuple[float, ...]:
    return tuple(float(rate) for rate in _names(text))


def _mixed(settings: Settings, values: Values) -> dict[str, Any]:
    from bench.mixed import run_mixed

    return run_mixed(settings, **values)


def _faults(settings: Settings, values: Values) -> dict[str, Any]:
    from bench.faults import FaultPlan, run_faults

    database_url = values.pop("database_url")
    if database_url:
        settings = settings.model_copy(update={"database_url": database_url})
    return run_faults(settings, FaultPlan(**values))


def _trained_router(settings: Settings) -> tuple[DifficultyClassifier, PolicyConfig]:
    from producer.router.route import Router
    from schemas.errors import ConfigError

    router = Router(settings)
    if router.classifier is None:
        raise ConfigError("no router is trained on this host yet: run llmq router train")
    return router.classifier, router.policy


def _classifier(settings: Settings, values: Values) -> dict[str, Any]:
    from bench.classifier import run_classifier_bench

    classifier, policy = _trained_router(settings)
    result = run_classifier_bench(classifier, policy, samples=values["samples"])
    return result | _teacher_baseline(values["baseline_samples"])


def _teacher_baseline(samples: int) -> dict[str, Any]:
    # The same kind of queries through the full all-MiniLM-L6-v2 encoder, in this run.
    from bench.harness import step
    from producer.router.dataset import load_examples
    from producer.router.distill import teacher_dir, teacher_latency_ms
    from schemas.percentiles import median

    texts = [f"{e.text} (case {i})" for i, e in enumerate(load_examples()[: samples + 20])]
    with step(f"the full encoder on {len(texts)} queries (20 warm-up)"):
        timings = teacher_latency_ms(teacher_dir(), texts)[20:]
    return {"teacher_encode_p50_ms": round(median(timings), 3)}


def _routing(settings: Settings, values: Values) -> dict[str, Any]:
    from bench.routing import run_routing
    from schemas.errors import ConfigError

    classifier, policy = _trained_router(settings)
    shares = [float(x) for x in values.pop("mix").split(",")]
    if len(shares) != len(Tier) or abs(sum(shares) - 1) > 1e-6:
        raise ConfigError("--mix needs three shares (small,medium,large) that add up to 1")
    mix = dict(zip(Tier, shares, strict=True))
    return run_routing(settings, classifier, policy, mix=mix, **values)


def _upload(settings: Settings, values: Values) -> dict[str, Any]:
    from bench.upload import run_upload

    return run_upload(settings, lines=values["lines"])


SAMPLES = ("-n", "--samples")

BENCHES: tuple[Bench, ...] = (
    Bench(
        "overhead",
        "TTFT: engine in-process vs the queue path",
        "bench.overhead:run_overhead",
        (
            opt(*SAMPLES, default=30, help="requests per path"),
            opt("--max-tokens", default=32, help="tokens per answer"),
            opt("--blocks", default=2, help="alternating blocks per side"),
        ),
    ),
    Bench(
        "batching",
        "tokens/s vs requests at once (1, 2, 4, 8, 16), direct vs queued",
        "bench.batching:run_batching",
        (
            opt("--concurrency", default=16, help="requests at once of the headline figures (N)"),
            opt("--rounds", default=3, help="rounds per side (figures are medians)"),
            opt("--max-tokens", default=64, help="tokens per answer"),
            opt("--levels", default="1,2,4,8,16", type=str, help="requests at once, swept"),
            opt("--waves", default=2, help="requests each in-flight slot sends per level"),
        ),
    ),
    Bench(
        "warm",
        "TTFT: cold engine vs warmed worker, 2k system prompt",
        "bench.warm:run_warm",
        (
            opt("--prompt", default="support", type=str, help="registered system prompt"),
            opt("--max-tokens", default=8, help="tokens per answer"),
        ),
    ),
    Bench(
        "gateway",
        "TTFT: through the HTTP gateway vs the client",
        "bench.gateway:run_gateway",
        (
            opt(*SAMPLES, default=30, help="requests per path"),
            opt("--max-tokens", default=8, help="tokens per answer"),
            opt("--port", default=8765, help="port of the gateway it starts"),
        ),
    ),
    Bench(
        "submit-order",
        "TTFT: a new job's message before its row vs its row first (or the row at once vs "
        "delayed), on the job database",
        "bench.submit_order:run_submit_order",
        (
            opt(*SAMPLES, default=150, help="pairs of requests (one of each order)"),
            opt("--max-tokens", default=4, help="tokens per answer"),
            switch("--gateway", help="through llmq gateway (the key as Idempotency-Key)"),
            opt("--port", default=8765, help="port of the gateway it starts"),
            switch(
                "--row-delay",
                help="message first on both sides: the row at once vs after "
                "LLMQ_ROW_WRITE_DELAY_MS",
            ),
        ),
    ),
    Bench(
        "priority",
        "interactive TTFT: idle worker vs one busy with a batch flood",
        "bench.priority:run_priority",
        (
            opt(*SAMPLES, default=100, help="interactive requests (100 or more)"),
            opt("--batch-jobs", default=1000, help="batch backlog size"),
            opt("--concurrency", default=8, help="the worker's slots"),
            opt("--max-tokens", default=8, help="tokens per interactive request"),
            opt("--batch-max-tokens", default=48, help="tokens per batch job"),
            opt(
                "--blocks",
                default=2,
                help="loaded phases, the idle samples around and between them (ABBA order)",
            ),
            opt("--seed", default=7, help="random seed (when each request is sent)"),
            opt(
                "--arrival-jitter-s",
                default=0.25,
                type=float,
                help="random part of the pause before each request (0: in step with the engine)",
            ),
        ),
    ),
    Bench(
        "abuse",
        "interactive TTFT through the gateway while it is attacked: /metrics and /readyz "
        "floods, one key's batches on a full queue, a 50,000-line upload, slow readers, "
        "bad keys, NUL and oversized input; 5xx, valid-key refusals, stuck rows",
        "bench.abuse:run_abuse",
        (
            opt(*SAMPLES, default=100, help="interactive requests per phase (100 or more)"),
            opt("--max-tokens", default=8, help="tokens per interactive request"),
            opt("--port", default=8766, help="port of the gateway it starts"),
            opt("--seed", default=7, help="random seed (the pauses between requests)"),
            opt(
                "--phases",
                type=_names,
                help="which phases run, comma-separated (default: all; idle always runs first)",
            ),
        ),
    ),
    Bench(
        "upload",
        "a large batch file stored and enqueued (private Redis): times and peak memory",
        _upload,
        (opt("--lines", default=100_000, help="request lines in the file"),),
        on_engine=False,
    ),
    Bench(
        "batch",
        "N short requests as one batch vs one at a time; interactive TTFT during the batch",
        "bench.batch:run_batch",
        (
            opt("--requests", default=200, help="requests, as one batch and one at a time"),
            opt("--max-tokens", default=8, help="tokens per request"),
            opt(*SAMPLES, default=20, help="interactive TTFT samples, idle and during"),
            opt("--concurrency", default=16, help="the worker's slots (a tier's default)"),
        ),
    ),
    Bench(
        "faults",
        "kill workers, restart and fail over Redis, poison and fuzz: count losses",
        _faults,
        (
            opt("--kills", default=20, help="workers killed holding work"),
            opt("--restart-jobs", default=20, help="jobs around a Redis crash"),
            opt("--failover-jobs", default=12, help="jobs around a Sentinel failover (0: skip)"),
            opt("--reconnects", default=100, help="finished-stream re-reads"),
            opt("--fuzz-cases", default=1000, help="bad inputs of each kind"),
            opt("--max-tokens", default=96, help="tokens per killed job"),
            opt("--seed", default=7, help="random seed (fuzz cases, kills, stream re-reads)"),
            opt(
                "--database-url",
                type=str,
                help="job database of the lab (default: LLMQ_DATABASE_URL, else a fresh "
                "SQLite file)",
            ),
            opt("--logs", type=Path, dest="logs_dir", help="keep the lab workers' logs here"),
        ),
        on_engine=False,
    ),
    Bench(
        "peer",
        "vLLM's own OpenAI server vs llmq's gateway, same engine, openai SDK",
        _peer,
        (
            opt("--blocks", default=2, help="alternating blocks per side"),
            opt("-n", "--single", default=30, help="single-stream requests"),
            opt("--max-tokens", default=64, help="tokens per answer"),
            opt("--concurrency", default=16, help="requests at once"),
            opt("--rounds", default=2, help="concurrent rounds per block"),
        ),
    ),
    Bench(
        "compat",
        "the OpenAI features clients rely on (streams, stop, structured outputs, "
        "logprobs, n, tools, /v1/completions...) probed on vLLM's own server, then on "
        "llmq's gateway, same engine: pass or fail per probe on each side",
        "bench.compat:run_compat",
    ),
    Bench(
        "classifier",
        "routing classifier latency, accuracy and confusion on held-out requests",
        _classifier,
        (
            opt(*SAMPLES, default=1000, help="timed routing decisions"),
            opt("--baseline-samples", default=200, help="queries through the full encoder"),
        ),
        on_engine=False,
    ),
    Bench(
        "routing",
        "the cost-quality frontier of auto routing on this host's small and large tiers "
        "(each case answered once per tier, one engine at a time, the threshold swept "
        "offline), and a mixed-workload simulation: routed vs all-large",
        _routing,
        (
            opt(
                "--profile",
                default=Path("deploy/profiles/gpu-h100.json"),
                type=Path,
                dest="profile_path",
                help="latency profile of the tiers",
            ),
            opt("--mix", default="0.6,0.25,0.15", type=str, help="small,medium,large shares"),
            opt("--requests", default=2000, help="simulated requests"),
            opt("--seed", default=7, help="seed of the workload"),
            opt("--output-tokens", default=200, help="tokens per request"),
            opt(
                "--measured-cases",
                default=344,
                help="shipped cases answered on small and on large for the frontier (0: skip)",
            ),
            opt(
                "--measured-max-tokens",
                default=0,
                help="tokens per frontier answer (0: each case's own budget, else 32)",
            ),
            opt(
                "--max-quality-drop",
                default=3.0,
                type=float,
                help="the operating point: cheapest large share within this many points "
                "of all-large, by the interval's bound",
            ),
            opt(
                "--answers-dir",
                default=None,
                type=Path,
                help="where the per-tier answers are stored (default: frontier/ in the "
                "router's folder)",
            ),
            opt(
                "--reuse-answers",
                default=0,
                help="1: evaluate the stored answers again where they cover the cases "
                "(no engine for those tiers)",
            ),
            opt(
                "--local-profile",
                default=1,
                help="1: also simulate on this host's measured profile (starts the small "
                "engine); 0: the GPU profile only",
            ),
        ),
        on_engine=False,
    ),
    Bench(
        "mixed",
        "a mixed day (support chats and a batch flood): llmq against vLLM's own server "
        "used three ways, goodput and SLO attainment per side",
        _mixed,
        (
            opt("--minutes", default=2.0, type=float, help="length of the trace"),
            opt("--seed", default=7, help="seed of the trace"),
            switch("--with-restart", help="kill and restart each side's engine at half-time"),
            opt(
                "--interactive-rate",
                default=0.25,
                type=float,
                help="interactive requests per second",
            ),
            opt("--batch-rate", default=2.0, type=float, help="batch requests per second"),
            opt(
                "--sides",
                default="vllm_fcfs,vllm_priority,vllm_capped,llmq",
                type=_names,
                help="which sides run, in this order (llmq, vllm_fcfs, vllm_priority, vllm_capped)",
            ),
            opt(
                "--blocks",
                default=1,
                help="run the sides this many times, every other pass in reverse (2: ABBA); "
                "each side's figures pool its passes",
            ),
            opt(
                "--flood-cap",
                default=8,
                help="vllm_capped: the most batch requests its client keeps in flight",
            ),
            opt(
                "--flood-rates",
                default="",
                type=_rates,
                help="a sweep: batch rates (per second, comma-separated) to rerun every "
                "side at, once each",
            ),
            opt("--tier", type=Tier, help="the tier whose model every side serves (default)"),
        ),
        on_engine=False,
    ),
    Bench(
        "prompt",
        "a verbose system prompt vs its compressed version: tokens, cold/warm TTFT, gate",
        "bench.prompt:run_prompt",
        (
            opt("--prompt", default="support-verbose", type=str, help="registered prompt"),
            opt(*SAMPLES, default=3, help="cold and warm TTFT samples per version"),
            opt(
                "--cases",
                help="customer-service cases the gate answers (default: every shipped one)",
            ),
            opt("--max-tokens", default=8, help="tokens per TTFT answer"),
            opt("--keep-examples", default=3, help="few-shot examples compress keeps"),
            opt("--gate-threshold", default=3.0, type=float, help="points B may lose"),
        ),
    ),
    Bench(
        "quant",
        "a tier vs its variant in another precision (float32 vs bfloat16 here): speed, gate",
        "bench.quant:run_quant",
        (
            opt("--n", default=60, help="shipped cases both variants answer"),
            opt("--max-tokens", default=16, help="tokens per answer"),
            opt("--concurrency", default=4, help="jobs in flight per block"),
            opt("--a-dtype", default="float32", type=str, help="A's dtype"),
            opt("--b-dtype", default="bfloat16", type=str, help="B's dtype"),
            opt("--b-quantization", type=str, help="B's quantization (awq, gptq...; none)"),
            opt("--b-model", type=str, help="B's model (a quantized checkpoint; default A's)"),
            opt("--threshold", default=3.0, type=float, help="points B may lose"),
        ),
    ),
)


def register(commands: Any) -> None:
    """Add ``llmq bench`` and one subcommand per entry of :data:`BENCHES`."""
    bench = commands.add_parser(
        "bench",
        help="side-by-side benchmarks (JSON on the last line)",
        description="Each benchmark prints its figures, then one JSON object as the last line.",
    )
    kinds = bench.add_subparsers(title="benchmarks", metavar="BENCH", required=True)
    for entry in BENCHES:
        parser = kinds.add_parser(
            entry.name,
            help=entry.help,
            description=entry.help,
            formatter_class=_HelpWithDefaults,
        )
        if entry.on_engine:
            parser.add_argument(
                "--tier", default="small", choices=[t.value for t in Tier], help="engine tier"
            )
        dests = [option.add_to(parser) for option in entry.options]
        parser.add_argument("--json", action="store_true", help="print only the JSON result")
        parser.set_defaults(handler=_handler(entry, dests))
    from bench.report import register_report

    register_report(kinds, run_with_defaults)


class _HelpWithDefaults(argparse.ArgumentDefaultsHelpFormatter):
    # Shows a default only where there is one to show (not for flags and unset options).
    def _get_help_string(self, action: argparse.Action) -> str:
        if action.default is None or action.default is False:
            return action.help or ""
        return super()._get_help_string(action) or ""


# Settings whose values a result must not carry (addresses may hold passwords).
SECRET_WORDS = ("URL", "KEY", "SECRET", "PASSWORD", "TOKEN")


def settings_from_env(environ: Mapping[str, str]) -> dict[str, str]:
    """The llmq settings ``environ`` sets, by variable; a credential's value (an address,
    a key) is given as ``(set)``."""
    known = {f"LLMQ_{name.upper()}" for name in Settings.model_fields}
    return {
        name: "(set)" if any(word in name for word in SECRET_WORDS) else value
        for name, value in sorted(environ.items())
        if name in known
    }


def _handler(entry: Bench, dests: list[str]) -> Callable[[argparse.Namespace], int]:
    def handle(args: argparse.Namespace) -> int:
        # A bench that runs an engine in its own process would have vLLM log to stdout,
        # which ``--json`` keeps for the result alone.
        os.environ.setdefault("VLLM_LOGGING_STREAM", "ext://sys.stderr")
        values = {name: getattr(args, name) for name in dests}
        if entry.on_engine:
            values["tier"] = Tier(args.tier)
        # Progress goes to stderr, step by step; stdout keeps only the figures.
        print(f"llmq bench {entry.name}: {entry.help}", file=sys.stderr)
        # Every result names where and on what code it ran (the commit as it starts):
        # a figure is evidence only with its host and commit beside it.
        from bench.mixed_report import code_commit, host_description

        commit = code_commit()
        started = time.monotonic()
        result = entry.runner()(Settings.from_env(), values)
        result.setdefault("host", host_description())
        result.setdefault("commit", commit)
        # Settings changed from their defaults change what was measured: say which
        # (never what a credential is: a result is committed).
        changed = settings_from_env(os.environ)
        if changed:
            result.setdefault("settings_from_env", changed)
        took = format_duration(time.monotonic() - started)
        print(f"llmq bench {entry.name}: finished in {took}", file=sys.stderr)
        return _emit(result, args.json)

    return handle


def run_with_defaults(
    settings: Settings, name: str, values: dict[str, Any], tier: Tier
) -> dict[str, Any]:
    """Run the benchmark ``name`` of :data:`BENCHES` with its options' defaults, updated
    by ``values``, on ``tier`` where it runs an engine (``llmq bench report``)."""
    (entry,) = [bench for bench in BENCHES if bench.name == name]
    given: dict[str, Any] = {}
    for option in entry.options:
        key = option.dest or option.flags[-1].removeprefix("--").replace("-", "_")
        given[key] = option.default
    given.update(values)
    if entry.on_engine:
        given["tier"] = tier
    return entry.runner()(settings, given)


def _emit(result: dict[str, Any], only_json: bool) -> int:
    if not only_json:
        for key, value in result.items():
            print(f"{key:>24}: {value}")
    print(json.dumps(result))
    return 0
