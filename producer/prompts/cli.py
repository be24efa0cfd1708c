"""``llmq prompts list | lint | compress``."""

from __future__ import annotations

import argparse
import json
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path
from typing import Any

from producer.prompts.lint import (
    CONTRADICTION_THRESHOLD,
    DUPLICATE_THRESHOLD,
    KEEP_EXAMPLES,
    Analysis,
    LintOptions,
    TokenCounter,
)
from schemas.errors import ConfigError
from schemas.prompt_registry import PromptRegistry, SystemPrompt
from schemas.queues import Tier
from schemas.settings import Settings

Handler = Callable[[argparse.Namespace], int]
DEFAULT_GATE_CASES = 40
DEFAULT_GATE_TAG = "customer-service"


def register(commands: Any) -> None:
    """Add ``llmq prompts`` and its subcommands."""
    prompts = commands.add_parser("prompts", help="list, lint and compress system prompts")
    actions = prompts.add_subparsers(title="actions", metavar="ACTION", required=True)

    listing = actions.add_parser("list", help="registered prompts, tokens, prefix-cache hits")
    listing.add_argument("--json", action="store_true", help="print JSON")
    listing.set_defaults(handler=_list)

    lint = actions.add_parser("lint", help="where a prompt spends tokens for nothing")
    lint.add_argument("prompt", metavar="NAME[@VERSION]")
    _analysis_options(lint)
    lint.add_argument("--json", action="store_true", help="print JSON")
    lint.set_defaults(handler=_lint)

    compress = actions.add_parser(
        "compress",
        help="register a shorter version, then gate it against the original",
        description="Registers the shorter text as the next version without changing what "
        "the name resolves to; --promote changes that, and only after a passing gate.",
    )
    compress.add_argument("prompt", metavar="NAME[@VERSION]")
    compress.add_argument(
        "--target-tokens", type=int, default=None, help="aim (default: half the original)"
    )
    _analysis_options(compress)
    compress.add_argument("--no-diff", action="store_true", help="do not print the diff")
    compress.add_argument(
        "--cases", type=Path, default=None, help="gate case file (default: the bundled one)"
    )
    compress.add_argument(
        "--tag", default=DEFAULT_GATE_TAG, help="gate only cases with this tag ('' for all)"
    )
    compress.add_argument("-n", "--n", type=int, default=DEFAULT_GATE_CASES, help="gate cases")
    compress.add_argument(
        "--gate-threshold", type=float, default=3.0, help="points of quality B may lose"
    )
    compress.add_argument("--no-gate", action="store_true", help="register only; no gate")
    compress.add_argument(
        "--promote", action="store_true", help="resolve NAME to the new version if the gate passes"
    )
    compress.add_argument("--json", action="store_true", help="print JSON")
    compress.set_defaults(handler=_compress)


def _analysis_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--tier", default=None, choices=[t.value for t in Tier], help="tokenizer of this tier"
    )
    parser.add_argument(
        "--threshold",
        type=float,
        default=DUPLICATE_THRESHOLD,
        help=f"similarity of near-duplicates (default {DUPLICATE_THRESHOLD})",
    )
    parser.add_argument(
        "--contradiction-threshold",
        type=float,
        default=CONTRADICTION_THRESHOLD,
        help=f"similarity of opposed instructions (default {CONTRADICTION_THRESHOLD})",
    )
    parser.add_argument(
        "--keep-examples",
        type=int,
        default=KEEP_EXAMPLES,
        help=f"few-shot examples to keep (default {KEEP_EXAMPLES})",
    )


def token_counter(settings: Settings, tier: Tier) -> TokenCounter:
    """Counts tokens with ``tier``'s tokenizer, as submit does."""
    from producer.limits import count_text_tokens, tokenizer_file

    path = tokenizer_file(settings, tier)
    return lambda text: count_text_tokens(text, path)


def _registry(settings: Settings) -> PromptRegistry:
    return PromptRegistry.load(settings.prompts_dir)


# ---- list ----------------------------------------------------------------------------


def _list(args: argparse.Namespace) -> int:
    settings = Settings.from_env()
    registry = _registry(settings)
    counters = {tier: token_counter(settings, tier) for tier in Tier}
    rows = []
    for prompt in registry.all():
        tokens = {t.value: counters[t](prompt.text) for t in Tier if t in prompt.tiers}
        rows.append((prompt, tokens))
    usage, problem = _usage(settings, {p.ref: max(t.values()) for p, t in rows})
    if args.json:
        print(
            json.dumps(
                [
                    {
                        "ref": p.ref,
                        "resolves": registry.resolve(p.name).ref == p.ref,
                        "tokens": tokens,
                        "jobs": usage[p.ref].jobs if p.ref in usage else 0,
                        "hit_rate": usage[p.ref].hit_rate if p.ref in usage else None,
                    }
                    for p, tokens in rows
                ]
            )
        )
        return 0
    table = [["PROMPT", "VERSION", "RESOLVES", *[t.value.upper() for t in Tier], "JOBS", "HITS"]]
    for prompt, tokens in rows:
        seen = usage.get(prompt.ref)
        table.append(
            [
                prompt.name,
                str(prompt.version),
                "*" if registry.resolve(prompt.name).ref == prompt.ref else "",
                *[f"{tokens[t.value]:,}" if t.value in tokens else "-" for t in Tier],
                str(seen.jobs) if seen else "0",
                f"{seen.hit_rate:.0%}" if seen and seen.hit_rate is not None else "-",
            ]
        )
    print(_aligned(table, right=(1, 3, 4, 5, 6, 7)))
    print("tokens per tier's tokenizer; * = what the bare name resolves to")
    if problem:
        print(f"(prefix-cache hits unavailable: {problem})")
    return 0


def _usage(settings: Settings, sizes: dict[str, int]) -> tuple[dict[str, Any], str | None]:
    from sqlalchemy.exc import SQLAlchemyError

    from producer.prompts.usage import prompt_usage
    from schemas.db import make_engine

    engine = make_engine(settings.database_url)
    try:
        return prompt_usage(engine, sizes), None
    except SQLAlchemyError as exc:
        reason = "no jobs table yet (llmq db upgrade)" if "no such table" in str(exc) else ""
        return {}, reason or f"the job database did not answer ({type(exc).__name__})"
    finally:
        engine.dispose()


def _aligned(rows: list[list[str]], *, right: tuple[int, ...] = ()) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    lines = []
    for row in rows:
        cells = [
            cell.rjust(widths[i]) if i in right else cell.ljust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append("  ".join(cells).rstrip())
    return "\n".join(lines)


# ---- lint ----------------------------------------------------------------------------


def _options(args: argparse.Namespace) -> LintOptions:
    return LintOptions(
        duplicate_threshold=args.threshold,
        contradiction_threshold=args.contradiction_threshold,
        keep_examples=args.keep_examples,
    )


def _resolve(args: argparse.Namespace) -> tuple[Settings, PromptRegistry, SystemPrompt, Tier]:
    settings = Settings.from_env()
    registry = _registry(settings)
    if args.tier:  # a prompt the tier does not serve is an error, not another tier's count
        tier = Tier(args.tier)
        return settings, registry, registry.resolve(args.prompt, tier=tier), tier
    prompt = registry.resolve(args.prompt)
    tier = settings.default_tier if settings.default_tier in prompt.tiers else min(prompt.tiers)
    return settings, registry, prompt, tier


def _lint(args: argparse.Namespace) -> int:
    from producer.prompts.embed import load_embedder
    from producer.prompts.lint import analyse

    settings, _, prompt, tier = _resolve(args)
    count = token_counter(settings, tier)
    _, analysis = analyse(prompt.text, count=count, embed=load_embedder(), options=_options(args))
    if args.json:
        print(json.dumps({"prompt": prompt.ref, "tier": tier.value, **analysis.to_dict()}))
        return 0
    print(render_lint(prompt.ref, tier, analysis))
    return 0


def render_lint(ref: str, tier: Tier, analysis: Analysis) -> str:
    """The findings as a table a person reads in ten seconds."""
    total = analysis.total_tokens
    removable = analysis.removable_tokens
    head = (
        f"{ref}: {total:,} tokens ({tier} tokenizer); about {removable:,} removable "
        f"({removable / total:.0%})"
        if total
        else f"{ref}: empty"
    )
    rows = [["KIND", "TOKENS", "LINES", "FINDING"]]
    for finding in analysis.findings:
        what = finding.summary
        if finding.texts:
            what += ": " + " / ".join(_quote(t) for t in finding.texts[:2])
            if len(finding.texts) > 2:
                what += f" (+{len(finding.texts) - 2})"
        lines = ",".join(str(n) for n in sorted(set(finding.lines))[:5])
        if len(set(finding.lines)) > 5:
            lines += ",…"
        rows.append([finding.kind, str(finding.tokens), lines, what])
    body = _aligned(rows, right=(1,)) if analysis.findings else "no findings"
    return f"{head}\n{body}"


def _quote(text: str, width: int = 48) -> str:
    return '"' + textwrap.shorten(text, width=width, placeholder="…") + '"'


# ---- compress ------------------------------------------------------------------------


def _compress(args: argparse.Namespace) -> int:
    from producer.prompts.compress import compress, unified_diff
    from producer.prompts.embed import load_embedder
    from producer.prompts.store import prompts_folder, register_version, write_pin

    folder = prompts_folder(Settings.from_env())  # first: the registry reads it
    settings, registry, prompt, tier = _resolve(args)
    count = token_counter(settings, tier)
    original = count(prompt.text)
    target = args.target_tokens if args.target_tokens is not None else original // 2
    result = compress(
        prompt.text,
        count=count,
        embed=load_embedder(),
        target_tokens=target,
        keep_examples=args.keep_examples,
        options=_options(args),
    )
    if result.tokens >= original:
        raise ConfigError(f"{prompt.ref} has nothing this pass can remove ({original} tokens)")
    existing = [
        p for p in registry.all() if p.name == prompt.name and p.text == result.text.rstrip("\n")
    ]
    if existing:
        new = existing[0]
        note = f"{new.ref} already holds this text; not registered again"
    else:
        new = register_version(folder, registry, prompt, result.text)
        note = f"registered {new.ref}"
    out = sys.stderr if args.json else sys.stdout
    if not args.no_diff and not args.json:
        print(unified_diff(prompt.text, new.text, before_name=prompt.ref, after_name=new.ref))
    resolves = PromptRegistry.load(settings.prompts_dir).resolve(prompt.name).ref
    print(
        f"{note}: {result.tokens:,} tokens, {result.tokens / original:.0%} of {prompt.ref}'s "
        f"{original:,} (target {target:,}); '{prompt.name}' resolves to {resolves}",
        file=out,
    )
    summary: dict[str, Any] = {
        "original": prompt.ref,
        "compressed": new.ref,
        "original_tokens": original,
        "compressed_tokens": result.tokens,
        "ratio": round(result.tokens / original, 3),
        "resolves_to": resolves,
        "verdict": None,
        "promoted": False,
    }
    if args.no_gate:
        print("gate skipped (--no-gate): nothing promoted", file=out)
    else:
        gate = _gate(settings, tier=tier, a_ref=prompt.ref, b_ref=new.ref, args=args, out=out)
        summary["gate"] = gate
        summary["verdict"] = gate["verdict"]
        if gate["verdict"] == "pass" and args.promote:
            write_pin(folder, prompt.name, new.version)
            summary["promoted"] = True
            summary["resolves_to"] = new.ref
            print(f"promoted: '{prompt.name}' now resolves to {new.ref}", file=out)
        elif args.promote:
            print(f"not promoted: the gate says {gate['verdict']}", file=out)
        elif gate["verdict"] == "pass":
            print(f"the gate passed; run again with --promote to serve {new.ref}", file=out)
    if args.json:
        print(json.dumps(summary))
    return 0


def _gate(
    settings: Settings,
    *,
    tier: Tier,
    a_ref: str,
    b_ref: str,
    args: argparse.Namespace,
    out: Any,
) -> dict[str, Any]:
    from producer.client import Client
    from producer.prompts.gate import run_prompt_gate, wait_for_prompts
    from producer.quality.cases import load_cases
    from schemas.progress import ProgressBar

    cases = [c for c in load_cases(args.cases) if not args.tag or args.tag in c.tags]
    if not cases:
        raise ConfigError(f"no gate cases tagged {args.tag!r}")
    cases = cases[: args.n]
    print(f"gate: {a_ref} (A) vs {b_ref} (B) on {len(cases)} cases, {tier} tier", file=out)
    with Client(settings) as client:
        wait_for_prompts(client, tier, [a_ref, b_ref])
        gate = run_prompt_gate(
            client,
            a_ref=a_ref,
            b_ref=b_ref,
            cases=cases,
            tier=tier,
            threshold_points=args.gate_threshold,
            progress=ProgressBar("  gate", len(cases), unit="cases"),
        )
    r = gate.result
    print(
        f"  quality A {r.a.value:.1%} [{r.a.low:.1%}, {r.a.high:.1%}]  "
        f"B {r.b.value:.1%} [{r.b.low:.1%}, {r.b.high:.1%}]  "
        f"B-A {r.delta.value * 100:+.1f} pts [{r.delta.low * 100:+.1f}, "
        f"{r.delta.high * 100:+.1f}]  flips {r.flips.a_only}/{r.flips.b_only}",
        file=out,
    )
    print(f"  verdict: {r.verdict.upper()} ({r.reason})", file=out)
    return gate.to_dict()
