"""``llmq bench ...``: each benchmark prints one JSON object as its last stdout line."""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from schemas.queues import Tier


def register(commands: Any) -> None:
    """Add the ``llmq bench`` commands (overhead, batching, warm, gateway, priority, faults,
    classifier, routing)."""
    bench = commands.add_parser("bench", help="side-by-side benchmarks (JSON on the last line)")
    kinds = bench.add_subparsers(title="benchmarks", metavar="BENCH", required=True)

    overhead = kinds.add_parser("overhead", help="TTFT: engine in-process vs the queue path")
    _common(overhead)
    overhead.add_argument("-n", "--samples", type=int, default=30, help="requests per path")
    overhead.add_argument("--max-tokens", type=int, default=32)
    overhead.add_argument("--blocks", type=int, default=2, help="alternating blocks per side")
    overhead.set_defaults(handler=_overhead)

    batching = kinds.add_parser("batching", help="tokens/s: direct 1 and N vs queued N")
    _common(batching)
    batching.add_argument("--concurrency", type=int, default=16)
    batching.add_argument("--rounds", type=int, default=3)
    batching.add_argument("--max-tokens", type=int, default=64)
    batching.set_defaults(handler=_batching)

    warm = kinds.add_parser("warm", help="TTFT: cold engine vs warmed worker, 2k system prompt")
    _common(warm)
    warm.add_argument("--prompt", default="support", help="registered system prompt")
    warm.add_argument("--max-tokens", type=int, default=8)
    warm.set_defaults(handler=_warm)

    gateway = kinds.add_parser("gateway", help="TTFT: through the HTTP gateway vs the client")
    _common(gateway)
    gateway.add_argument("-n", "--samples", type=int, default=30, help="requests per path")
    gateway.add_argument("--max-tokens", type=int, default=8)
    gateway.add_argument("--port", type=int, default=8765)
    gateway.set_defaults(handler=_gateway)

    _add_priority(kinds)
    _add_faults(kinds)
    _add_peer(kinds)

    classifier = kinds.add_parser("classifier", help="routing classifier latency and accuracy")
    classifier.add_argument("-n", "--samples", type=int, default=1000)
    classifier.add_argument("--json", action="store_true", help="print only the JSON result")
    classifier.add_argument(
        "--baseline-samples", type=int, default=200, help="queries through the full encoder"
    )
    classifier.set_defaults(handler=_classifier)

    routing = kinds.add_parser("routing", help="mixed-workload simulation: routed vs all-large")
    routing.add_argument("--profile", default="deploy/profiles/gpu-h100.json")
    routing.add_argument("--mix", default="0.6,0.25,0.15", help="small,medium,large shares")
    routing.add_argument("--requests", type=int, default=2000)
    routing.add_argument("--seed", type=int, default=7)
    routing.add_argument("--output-tokens", type=int, default=200, help="per request")
    routing.add_argument("--json", action="store_true", help="print only the JSON result")
    routing.set_defaults(handler=_routing)


def _add_priority(kinds: Any) -> None:
    priority = kinds.add_parser(
        "priority", help="interactive TTFT: idle worker vs one busy with a batch flood"
    )
    _common(priority)
    priority.add_argument(
        "-n", "--samples", type=int, default=100, help="interactive requests (100 or more)"
    )
    priority.add_argument("--batch-jobs", type=int, default=1000, help="batch backlog size")
    priority.add_argument("--concurrency", type=int, default=8, help="the worker's slots")
    priority.add_argument("--max-tokens", type=int, default=8, help="per interactive request")
    priority.add_argument("--batch-max-tokens", type=int, default=48, help="per batch job")
    priority.set_defaults(handler=_priority)


def _add_peer(kinds: Any) -> None:
    peer = kinds.add_parser(
        "peer", help="vLLM's own OpenAI server vs llmq's gateway, same engine, openai SDK"
    )
    _common(peer)
    peer.add_argument("--blocks", type=int, default=2, help="alternating blocks per side")
    peer.add_argument("-n", "--single", type=int, default=30, help="single-stream requests")
    peer.add_argument("--max-tokens", type=int, default=64)
    peer.add_argument("--concurrency", type=int, default=16, help="requests at once")
    peer.add_argument("--rounds", type=int, default=2, help="concurrent rounds per block")
    peer.set_defaults(handler=_peer)


def _peer(args: argparse.Namespace) -> int:
    from bench.peer import PeerPlan, run_peer
    from schemas.settings import Settings

    plan = PeerPlan(
        blocks=args.blocks,
        single=args.single,
        max_tokens=args.max_tokens,
        concurrency=args.concurrency,
        rounds=args.rounds,
    )
    return _emit(run_peer(Settings.from_env(), tier=Tier(args.tier), plan=plan), args.json)


def _add_faults(kinds: Any) -> None:
    faults = kinds.add_parser(
        "faults", help="kill workers, restart and fail over Redis, poison and fuzz: count losses"
    )
    faults.add_argument("--kills", type=int, default=20, help="workers killed holding work")
    faults.add_argument("--restart-jobs", type=int, default=20, help="jobs around a Redis crash")
    faults.add_argument(
        "--failover-jobs", type=int, default=12, help="jobs around a Sentinel failover (0: skip)"
    )
    faults.add_argument("--reconnects", type=int, default=100, help="finished-stream re-reads")
    faults.add_argument("--fuzz-cases", type=int, default=1000, help="bad inputs of each kind")
    faults.add_argument("--max-tokens", type=int, default=96, help="per killed job")
    faults.add_argument("--seed", type=int, default=7)
    faults.add_argument(
        "--database-url",
        help="job database of the lab (default: LLMQ_DATABASE_URL, else a fresh SQLite file)",
    )
    faults.add_argument("--logs", type=Path, help="keep the lab workers' logs in this folder")
    faults.add_argument("--json", action="store_true", help="print only the JSON result")
    faults.set_defaults(handler=_faults)


def _common(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--tier", default="small", choices=[t.value for t in Tier])
    parser.add_argument("--json", action="store_true", help="print only the JSON result")


def _overhead(args: argparse.Namespace) -> int:
    from bench.overhead import run_overhead
    from schemas.settings import Settings

    result = run_overhead(
        Settings.from_env(),
        tier=Tier(args.tier),
        samples=args.samples,
        max_tokens=args.max_tokens,
        blocks=args.blocks,
    )
    return _emit(result, args.json)


def _batching(args: argparse.Namespace) -> int:
    from bench.batching import run_batching
    from schemas.settings import Settings

    result = run_batching(
        Settings.from_env(),
        tier=Tier(args.tier),
        concurrency=args.concurrency,
        rounds=args.rounds,
        max_tokens=args.max_tokens,
    )
    return _emit(result, args.json)


def _warm(args: argparse.Namespace) -> int:
    from bench.warm import run_warm
    from schemas.settings import Settings

    result = run_warm(
        Settings.from_env(), tier=Tier(args.tier), max_tokens=args.max_tokens, prompt=args.prompt
    )
    return _emit(result, args.json)


def _gateway(args: argparse.Namespace) -> int:
    from bench.gateway import run_gateway
    from schemas.settings import Settings

    result = run_gateway(
        Settings.from_env(),
        tier=Tier(args.tier),
        samples=args.samples,
        max_tokens=args.max_tokens,
        port=args.port,
    )
    return _emit(result, args.json)


def _priority(args: argparse.Namespace) -> int:
    from bench.priority import run_priority
    from schemas.settings import Settings

    result = run_priority(
        Settings.from_env(),
        tier=Tier(args.tier),
        samples=args.samples,
        batch_jobs=args.batch_jobs,
        concurrency=args.concurrency,
        max_tokens=args.max_tokens,
        batch_max_tokens=args.batch_max_tokens,
    )
    return _emit(result, args.json)


def _faults(args: argparse.Namespace) -> int:
    from bench.faults import FaultPlan, run_faults
    from schemas.settings import Settings

    settings = Settings.from_env()
    if args.database_url:
        settings = settings.model_copy(update={"database_url": args.database_url})
    plan = FaultPlan(
        kills=args.kills,
        restart_jobs=args.restart_jobs,
        failover_jobs=args.failover_jobs,
        reconnects=args.reconnects,
        fuzz_cases=args.fuzz_cases,
        max_tokens=args.max_tokens,
        seed=args.seed,
        logs_dir=args.logs,
    )
    return _emit(run_faults(settings, plan), args.json)


def _classifier(args: argparse.Namespace) -> int:
    from bench.classifier import run_classifier_bench
    from producer.router.route import Router
    from schemas.errors import ConfigError
    from schemas.settings import Settings

    router = Router(Settings.from_env())
    if router.classifier is None:
        raise ConfigError("no router is trained on this host yet: run llmq router train")
    result = run_classifier_bench(router.classifier, router.policy, samples=args.samples)
    result.update(_teacher_baseline(args.baseline_samples))
    return _emit(result, args.json)


def _teacher_baseline(samples: int) -> dict[str, Any]:
    # The same kind of queries through the full all-MiniLM-L6-v2 encoder, in this run.
    import statistics

    from producer.router.dataset import load_examples
    from producer.router.distill import teacher_dir, teacher_latency_ms

    texts = [f"{e.text} (case {i})" for i, e in enumerate(load_examples()[: samples + 20])]
    timings = teacher_latency_ms(teacher_dir(), texts)[20:]
    return {"teacher_encode_p50_ms": round(statistics.median(timings), 3)}


def _routing(args: argparse.Namespace) -> int:
    from pathlib import Path

    from bench.routing import run_routing
    from producer.router.route import Router
    from schemas.errors import ConfigError
    from schemas.settings import Settings

    settings = Settings.from_env()
    router = Router(settings)
    if router.classifier is None:
        raise ConfigError("no router is trained on this host yet: run llmq router train")
    shares = [float(x) for x in args.mix.split(",")]
    if len(shares) != len(Tier) or abs(sum(shares) - 1) > 1e-6:
        raise ConfigError("--mix needs three shares (small,medium,large) that add up to 1")
    result = run_routing(
        settings,
        router.classifier,
        router.policy,
        profile_path=Path(args.profile),
        mix=dict(zip(Tier, shares, strict=True)),
        requests=args.requests,
        seed=args.seed,
        output_tokens=args.output_tokens,
    )
    return _emit(result, args.json)


def _emit(result: dict[str, Any], only_json: bool) -> int:
    if not only_json:
        for key, value in result.items():
            print(f"{key:>24}: {value}")
    print(json.dumps(result))
    return 0
