"""The A/B gate end to end: both variants answer the cases, one block each, then the verdict.

Quality does not care where the answers ran; timings do, so each variant's block runs
with only its own engine up where the gate starts the workers itself (see
``producer.quality.blocks``). Runs and promotions are stored (tables ``ab_runs`` and
``tier_promotions``); a base tier's workers serve the variant last promoted to it.
"""

from __future__ import annotations

import getpass
import hashlib
import sys
import uuid
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

from sqlalchemy import Select, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from producer.client import Client
from producer.quality.blocks import Spawn, other_engines, worker_block
from producer.quality.cases import Case
from producer.quality.report import AbReport, build_report
from producer.quality.runner import DEFAULT_CONCURRENCY, CaseAnswer, VariantRun, run_cases
from producer.quality.scoring import Embed
from producer.quality.stats import DEFAULT_THRESHOLD_POINTS
from schemas.boundary import database_error
from schemas.errors import ConfigError, InvalidRequest
from schemas.progress import ProgressBar
from schemas.queues import Tier
from schemas.settings import Settings
from schemas.tables import AbRun, TierPromotion


@dataclass(frozen=True)
class GateOptions:
    """How ``llmq ab`` runs: which variants, how many cases, what budget."""

    a: Tier
    b: Tier
    n: int | None = None
    """The first ``n`` cases (all by default)."""
    max_tokens: int | None = None
    """Overrides every case's answer budget, for both variants."""
    b_max_tokens: int | None = None
    """Overrides B's budget alone (a degraded B, to see the gate fail)."""
    concurrency: int = DEFAULT_CONCURRENCY
    threshold_points: float = DEFAULT_THRESHOLD_POINTS
    spawn: Spawn = "auto"


def counting_answers(bar: ProgressBar) -> Callable[[CaseAnswer], None]:
    """``on_answer`` for ``run_cases``: one step of ``bar`` per answer, failures noted."""
    failed = 0

    def step(answer: CaseAnswer) -> None:
        nonlocal failed
        failed += not answer.ok
        bar.advance(note=f"{failed} failed" if failed else None)

    return step


def _stderr_line(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _no_line(_line: str) -> None:
    pass


def cases_source(path: Path | None, cases: Sequence[Case]) -> str:
    """``name#sha256-prefix`` of the case file, so a stored run names what it measured."""
    from producer.quality.cases import BUNDLED_CASES

    where = path or BUNDLED_CASES
    digest = hashlib.sha256(where.read_bytes()).hexdigest()[:12]
    return f"{where.name}#{digest} ({len(cases)} cases)"


def run_gate(
    settings: Settings,
    cases: Sequence[Case],
    options: GateOptions,
    *,
    source: str,
    progress: bool = True,
    embed: Embed | None = None,
    client_factory: Callable[[Settings], Client] = Client,
) -> AbReport:
    """Answer ``cases`` on A, then on B, each in its own block, and compare them.

    Raises ``InvalidRequest`` for a tier not configured, ``NoWarmWorker`` or
    ``EngineError`` when a variant's worker cannot serve, ``BrokerUnavailable`` or
    ``DatabaseUnavailable``.
    """
    for tier in (options.a, options.b):
        if tier not in settings.tiers:
            known = ", ".join(sorted(str(t) for t in settings.tiers))
            raise InvalidRequest(f"no tier {tier} is configured (configured: {known})")
    if options.a == options.b:
        raise InvalidRequest("A and B are the same tier; name a variant for B")
    chosen = list(cases[: options.n] if options.n else cases)
    runs: list[VariantRun] = []
    shared: list[int] = []
    budgets = (options.max_tokens, options.b_max_tokens or options.max_tokens)
    with client_factory(settings) as client:
        for label, tier, budget in zip("AB", (options.a, options.b), budgets, strict=True):
            say = _stderr_line if progress else _no_line
            with worker_block(settings, tier, spawn=options.spawn, say=say):
                before = other_engines(settings, tier)
                # Made once the worker is warm: its rate and ETA are the answers' alone.
                bar = ProgressBar(f"{label} {tier}".ljust(16), len(chosen), enabled=progress)
                with bar:
                    runs.append(
                        run_cases(
                            client,
                            tier,
                            chosen,
                            max_tokens=budget,
                            concurrency=options.concurrency,
                            on_answer=counting_answers(bar),
                        )
                    )
                shared.append(max(before, other_engines(settings, tier)))
    return build_report(
        chosen,
        runs[0],
        runs[1],
        source=source,
        threshold_points=options.threshold_points,
        other_engines=(shared[0], shared[1]),
        embed=embed,
    )


def store_run(sessions: sessionmaker[Session], report: AbReport) -> str:
    """Record a gate run; return its id. Raises ``DatabaseUnavailable``."""
    run_id = uuid.uuid4().hex
    row = AbRun(
        id=run_id,
        a=report.a.tier,
        b=report.b.tier,
        cases=report.cases[:255],
        n=report.n,
        threshold_points=report.gate.threshold_points,
        verdict=report.gate.verdict,
        report=report.model_dump(mode="json"),
    )
    try:
        with sessions.begin() as session:
            session.add(row)
    except SQLAlchemyError as exc:
        raise database_error(exc, doing="record the gate run") from exc
    return run_id


@dataclass(frozen=True)
class Promotion:
    """What ``llmq ab promote`` decided."""

    id: str
    tier: Tier
    variant: Tier
    ab_run_id: str | None
    verdict: str | None
    forced: bool


def promote(
    settings: Settings,
    sessions: sessionmaker[Session],
    variant: Tier,
    *,
    force: bool = False,
    reason: str | None = None,
    promoted_by: str | None = None,
) -> Promotion:
    """Make ``variant`` what its base tier serves, if its last gate against the tier passed.

    With ``force`` a reason is required and the promotion goes ahead whatever the gate
    said (recorded as forced). Naming a base tier puts its own configuration back.
    The tier's workers pick the decision up when they (re)start. Raises ``ConfigError``
    (not a configured variant, gate not passed, force without a reason) or
    ``DatabaseUnavailable``.
    """
    base = variant.base
    if variant.is_variant and variant not in settings.tiers:
        raise ConfigError(f"no variant {variant} is configured")
    if force and not (reason and reason.strip()):
        raise ConfigError("--force needs --reason: why promote without a passing gate")
    last = _last_run(sessions, base, variant) if variant.is_variant else None
    verdict = last.verdict if last is not None else None
    if variant.is_variant and verdict != "pass" and not force:
        said = f"its last gate against {base} was {verdict}" if last else "it has no gate run"
        raise ConfigError(
            f"{variant} cannot be promoted: {said}; run llmq ab --a {base} --b {variant} "
            "--cases FILE, or promote with --force --reason"
        )
    config = settings.tier(variant).model_dump(mode="json") if variant.is_variant else None
    promotion_id = uuid.uuid4().hex
    row = TierPromotion(
        id=promotion_id,
        tier=base.value,
        variant=variant.value,
        config=config,
        ab_run_id=last.id if last is not None else None,
        forced=force,
        reason=reason,
        promoted_by=(promoted_by or _who())[:200],
    )
    try:
        with sessions.begin() as session:
            session.add(row)
    except SQLAlchemyError as exc:
        raise database_error(exc, doing="record the promotion") from exc
    return Promotion(
        id=promotion_id,
        tier=base,
        variant=variant,
        ab_run_id=row.ab_run_id,
        verdict=verdict,
        forced=force,
    )


def serving(sessions: sessionmaker[Session], tier: Tier) -> TierPromotion | None:
    """The newest promotion of ``tier`` (None: it serves its own configuration)."""
    query = (
        select(TierPromotion)
        .where(TierPromotion.tier == tier.base.value)
        .order_by(TierPromotion.created_at.desc(), TierPromotion.id.desc())
        .limit(1)
    )
    return _newest(sessions, query, doing="read the tier's promotions")


def _last_run(sessions: sessionmaker[Session], a: Tier, b: Tier) -> AbRun | None:
    query = (
        select(AbRun)
        .where(AbRun.a == a.value, AbRun.b == b.value)
        .order_by(AbRun.created_at.desc(), AbRun.id.desc())
        .limit(1)
    )
    return _newest(sessions, query, doing="read the last gate run")


Newest = TypeVar("Newest", TierPromotion, AbRun)


def _newest(sessions: sessionmaker[Session], query: Select[Newest], *, doing: str) -> Newest | None:
    """The first row of ``query``, detached from its session; raises
    ``DatabaseUnavailable`` (``doing`` says what failed)."""
    try:
        with sessions() as session:
            row = session.scalars(query).first()
            if row is not None:
                session.expunge(row)
            return row
    except SQLAlchemyError as exc:
        raise database_error(exc, doing=doing) from exc


def _who() -> str:
    try:
        return getpass.getuser()
    except (OSError, KeyError):
        return "unknown"
