"""``llmq route`` and ``llmq router eval|correct|train|retrain|tune``."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

from schemas.errors import InvalidRequest
from schemas.queues import Tier


def register_route(commands: Any) -> None:
    """Add ``llmq route TEXT`` and ``llmq route --jsonl``."""
    route = commands.add_parser("route", help="show the tier auto-routing picks, and why")
    route.add_argument("text", nargs="?", help="the request text")
    route.add_argument(
        "--jsonl", action="store_true", help="read JSON lines with a 'text' field from stdin"
    )
    route.set_defaults(handler=_route)


def register_router(commands: Any) -> None:
    """Add ``llmq router eval|correct|train|retrain|tune``."""
    router = commands.add_parser("router", help="train, evaluate, tune and correct the router")
    actions = router.add_subparsers(title="actions", metavar="ACTION", required=True)
    evaluate = actions.add_parser("eval", help="accuracy and confusion on the validation split")
    evaluate.add_argument("--json", action="store_true")
    evaluate.add_argument(
        "--heldout",
        action="store_true",
        help="score the held-out requests (written apart from the training data) instead",
    )
    evaluate.set_defaults(handler=_eval)
    correct = actions.add_parser("correct", help="record the tier a job should have had")
    correct.add_argument("job_id")
    correct.add_argument("tier", choices=[t.value for t in Tier])
    correct.set_defaults(handler=_correct)
    train = actions.add_parser(
        "train", help="distil the encoder and train the router (needs the cpu or gpu extra)"
    )
    train.add_argument("--seed", type=int, default=7)
    train.set_defaults(handler=_train, with_corrections=False)
    retrain = actions.add_parser(
        "retrain", help="train again, adding the job rows an operator corrected"
    )
    retrain.add_argument("--seed", type=int, default=7)
    retrain.set_defaults(handler=_train, with_corrections=True)
    tune = actions.add_parser(
        "tune",
        help="choose the large threshold from the measured frontier (llmq bench routing) "
        "and write it into the router's artifact",
    )
    tune.add_argument(
        "--max-quality-drop",
        type=float,
        default=3.0,
        metavar="POINTS",
        help="the largest quality drop against all-large, by the interval's bound (3)",
    )
    tune.add_argument(
        "--frontier",
        type=Path,
        default=None,
        help="the frontier JSON, or a saved llmq bench routing --json output "
        "(default: frontier.json in the router's folder, where the bench writes it)",
    )
    tune.add_argument(
        "--score",
        choices=["best", "difficulty", "outcome"],
        default="best",
        help="the score to route by: p(large) by difficulty, the outcome head's chance "
        "that large answers better, or best: the one that sends fewest requests large "
        "within the drop (default)",
    )
    tune.add_argument("--json", action="store_true")
    tune.set_defaults(handler=_tune)


def _router() -> Any:
    from producer.router.route import Router
    from schemas.settings import Settings

    return Router(Settings.from_env())


def _route(args: argparse.Namespace) -> int:
    from producer.router.route import Router
    from schemas.requests import GenerationRequest

    router: Router = _router()
    if args.jsonl:
        for number, line in enumerate(sys.stdin, start=1):
            if not line.strip():
                continue
            print(json.dumps(_decide(router, GenerationRequest, line, number)))
        return 0
    if args.text is None or not args.text.strip():
        raise InvalidRequest("give the text to route (it must not be empty), or use --jsonl")
    decision = router.route(GenerationRequest.from_text(args.text), requested="auto")
    print(json.dumps(decision.model_dump(mode="json") | _score(router, args.text)))
    return 0


def _score(router: Any, text: str) -> dict[str, Any]:
    """The decision score (p(large), or the outcome head's where the router is tuned on
    it) and the threshold it is compared with."""
    from producer.router.policy import decision_score

    score = None
    if router.classifier is not None:
        value, _name = decision_score(router.classifier.predict(text), router.policy)
        score = round(value, 4)
    return {
        "score": score,
        "score_kind": router.policy.score,
        "threshold": router.policy.large_threshold,
        "threshold_source": router.threshold_source,
    }


def _decide(router: Any, request_type: Any, line: str, number: int) -> dict[str, Any]:
    problem = f"line {number}: need a JSON object with a non-empty 'text' field"
    try:
        text = json.loads(line)["text"]
    except (ValueError, KeyError, TypeError):
        return {"line": number, "error": problem}
    if not isinstance(text, str) or not text.strip():
        return {"line": number, "error": problem}
    decision = router.route(request_type.from_text(text), requested="auto")
    return decision.model_dump(mode="json") | _score(router, text)  # type: ignore[no-any-return]


def _eval(args: argparse.Namespace) -> int:
    from producer.router.dataset import load_examples, load_heldout
    from producer.router.evaluation import evaluate_router
    from schemas.errors import ConfigError

    router = _router()
    if router.classifier is None:
        raise ConfigError("no router is trained on this host yet: run llmq router train")
    name = "held-out" if args.heldout else "validation"
    if args.heldout:
        validation = load_heldout()
    else:
        validation = [e for e in load_examples() if e.split == "validation"]
    result = evaluate_router(router.classifier, router.policy, validation).as_dict()
    result |= {
        "examples": len(validation),
        "set": name,
        "large_threshold": router.policy.large_threshold,
        "threshold_source": router.threshold_source,
    }
    if args.json:
        print(json.dumps(result))
        return 0
    print(
        f"{name} examples: {len(validation)}   accuracy: {result['accuracy']}   "
        f"large threshold: {router.policy.large_threshold} ({router.threshold_source})"
    )
    for tier in Tier:
        precision = result["precision"][tier.value]  # type: ignore[index]
        recall = result["recall"][tier.value]  # type: ignore[index]
        print(f"  {tier.value:<7} precision {precision:.3f}  recall {recall:.3f}")
    print("confusion (rows: true, columns: routed):  small medium large")
    for tier, row in zip(Tier, result["confusion"], strict=True):  # type: ignore[call-overload]
        print(f"  {tier.value:<7} " + " ".join(f"{n:>6}" for n in row))
    return 0


def _correct(args: argparse.Namespace) -> int:
    from producer.router.corrections import correct_tier
    from schemas.db import make_engine, make_sessions
    from schemas.settings import Settings

    engine = make_engine(Settings.from_env().database_url)
    try:
        correct_tier(make_sessions(engine), args.job_id, Tier(args.tier))
    finally:
        engine.dispose()
    print(f"job {args.job_id} marked as {args.tier}; run llmq router retrain to learn from it")
    return 0


def _train(args: argparse.Namespace) -> int:
    import os

    from producer.router.corrections import corrected_examples
    from producer.router.training import train_router
    from schemas.db import make_engine, make_sessions
    from schemas.settings import Settings

    # Its own bars tell the story; transformers' would redraw over them (tqdm reads this
    # when first imported, in training).
    os.environ.setdefault("TQDM_DISABLE", "1")
    settings = Settings.from_env()
    extra = []
    if args.with_corrections:
        engine = make_engine(settings.database_url)
        try:
            extra = corrected_examples(make_sessions(engine))
        finally:
            engine.dispose()
    path, metadata = train_router(settings, seed=args.seed, extra=extra, progress=True)
    print(json.dumps({"artifact": str(path), "corrections": len(extra), **metadata}))
    return 0


def _tune(args: argparse.Namespace) -> int:
    from producer.router.tuning import FRONTIER_FILE, read_frontier_file, tune_router
    from schemas.settings import Settings

    settings = Settings.from_env()
    path = args.frontier or settings.router_folder / FRONTIER_FILE
    written, point, score = tune_router(
        settings.router_folder,
        read_frontier_file(path),
        max_quality_drop_points=args.max_quality_drop,
        score=args.score,
    )
    result = {
        "artifact": str(written),
        "frontier": str(path),
        "score": score,
        **point.model_dump(mode="json"),
    }
    if args.json:
        print(json.dumps(result))
        return 0
    what = "p(large answers better)" if score == "outcome" else "p(large)"
    print(
        f"large threshold {point.threshold:g} on {what}: "
        f"{100 * point.large_share:.1f}% of requests go "
        f"large, quality {abs(point.quality_drop_points):.2f} points "
        f"{'below' if point.quality_drop_points >= 0 else 'above'} all-large (the drop at "
        f"most {point.quality_drop_upper_points:.2f} by the 95% interval, allowed "
        f"{point.max_quality_drop_points:g})"
    )
    if point.latency_ratio_vs_all_large is not None:
        print(f"mean latency {point.latency_ratio_vs_all_large:.2f}x all-large")
    print(f"written to {written} (now current)")
    if "router_large_threshold" in settings.model_fields_set:
        print("note: LLMQ_ROUTER_LARGE_THRESHOLD is set and overrides the tuned threshold")
    return 0
