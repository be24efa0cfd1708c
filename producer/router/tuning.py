"""``llmq router tune``: the large threshold chosen from a measured frontier.

The frontier (``llmq bench routing``) sweeps the threshold on a decision score over
cases answered on both tiers: p(large) by difficulty, and the outcome head's chance
that large answers better (:mod:`producer.router.outcomes`). Tuning picks the cheapest
point within a quality drop and writes that threshold (and the head, for the outcome
score) into a copy of the current artifact, which then serves. The
threshold a router uses is, in order: ``LLMQ_ROUTER_LARGE_THRESHOLD`` when set, the
artifact's tuned threshold, the setting's default.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from producer.router.artifact import current_artifact_path, load_artifact, save_artifact
from producer.router.frontier import OperatingPoint, frontier_from_json, pick_operating_point
from producer.router.outcomes import OUTCOME_HEAD_KEY
from schemas.errors import ConfigError

FRONTIER_FILE = "frontier.json"
"""Where ``llmq bench routing`` stores its frontier, in the router's folder."""

TUNED_KEY = "tuned"


def read_frontier_file(path: Path) -> dict[str, Any]:
    """The JSON object in ``path``: a stored frontier or the bench's ``--json`` line (the
    last JSON line of a saved output). Raises ``ConfigError``."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(
            f"cannot read the frontier {path}: {exc.strerror} (llmq bench routing writes it)"
        ) from exc
    for candidate in [text, *reversed(text.strip().splitlines())]:
        try:
            found = json.loads(candidate)
        except ValueError:
            continue
        if isinstance(found, dict):
            return found
    raise ConfigError(f"{path} holds no JSON object")


Score = Literal["difficulty", "outcome"]
SCORES: tuple[Score, ...] = ("difficulty", "outcome")


def candidate_frontiers(frontier_data: Mapping[str, Any]) -> dict[Score, Mapping[str, Any]]:
    """The frontiers a bench result offers to tune on: the difficulty classifier's, and
    the outcome head's (measured out of fold, with the head fitted on every case) where
    the bench measured it."""
    found: dict[Score, Mapping[str, Any]] = {"difficulty": frontier_data}
    learned = (frontier_data.get("outcome_routers") or {}).get("learned_cv")
    if isinstance(learned, dict) and "frontier" in learned and "head" in learned:
        found["outcome"] = learned
    return found


def tune_router(
    folder: Path,
    frontier_data: Mapping[str, Any],
    *,
    max_quality_drop_points: float,
    score: Score | Literal["best"] = "best",
) -> tuple[Path, OperatingPoint, Score]:
    """Write the operating point's threshold (and, tuned on the outcome head, the head)
    into a copy of the current artifact and make it current; return its path, the point
    and the score it routes by.

    ``score``: ``difficulty`` (p(large)), ``outcome`` (the outcome head's chance that
    large answers better) or ``best``: of those the frontier holds, the one whose
    operating point sends the fewest requests large (difficulty on a tie).

    Raises ``ConfigError`` when no router is trained, when a frontier was measured with
    another router (its scores would not mean the same), when the asked score was not
    measured, or when no point qualifies.
    """
    path = current_artifact_path(folder)
    if path is None:
        raise ConfigError("no router is trained on this host yet: run llmq router train")
    artifact = load_artifact(path)
    candidates = candidate_frontiers(frontier_data)
    if score != "best" and score not in candidates:
        raise ConfigError(
            f"the frontier holds no {score} router: run llmq bench routing again "
            "(--reuse-answers 1 measures it on the stored answers without engines)"
        )
    names = SCORES if score == "best" else (score,)
    points: dict[Score, OperatingPoint] = {}
    cases: dict[Score, int] = {}
    problems = []
    for name in (n for n in names if n in candidates):
        frontier = frontier_from_json(candidates[name])
        cases[name] = frontier.cases
        if frontier.router is not None and frontier.router != artifact.model_hash:
            raise ConfigError(
                f"the frontier was measured with router {frontier.router}, but the current "
                f"one is {artifact.model_hash}: run llmq bench routing again "
                "(--reuse-answers 1 re-scores the stored answers without engines)"
            )
        try:
            points[name] = pick_operating_point(
                frontier, max_quality_drop_points=max_quality_drop_points
            )
        except ConfigError as exc:
            problems.append(f"{name}: {exc}")
    if not points:
        raise ConfigError("; ".join(problems))
    chosen = min(points, key=lambda n: (points[n].large_share, SCORES.index(n)))
    point = points[chosen]
    metadata = {
        **artifact.metadata,
        TUNED_KEY: {**point.model_dump(mode="json"), "cases": cases[chosen], "score": chosen},
    }
    metadata.pop(OUTCOME_HEAD_KEY, None)
    if chosen == "outcome":
        metadata[OUTCOME_HEAD_KEY] = dict(candidates["outcome"]["head"])
    written = save_artifact(replace(artifact, metadata=metadata), folder)
    return written, point, chosen


def tuned_score(metadata: Mapping[str, Any]) -> Score:
    """The score ``llmq router tune`` chose for an artifact (difficulty when it says
    none, as artifacts tuned before the outcome head)."""
    tuned = metadata.get(TUNED_KEY)
    found = tuned.get("score") if isinstance(tuned, dict) else None
    return "outcome" if found == "outcome" else "difficulty"


def tuned_threshold(metadata: Mapping[str, Any]) -> float | None:
    """The large threshold ``llmq router tune`` wrote into an artifact, if any."""
    tuned = metadata.get(TUNED_KEY)
    if isinstance(tuned, dict) and isinstance(tuned.get("threshold"), int | float):
        return float(tuned["threshold"])
    return None
