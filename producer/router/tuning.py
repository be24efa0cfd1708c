"""``llmq router tune``: the large threshold chosen from a measured frontier.

The frontier (``llmq bench routing``) sweeps the threshold on p(large) over cases
answered on both tiers; tuning picks its cheapest point within a quality drop and
writes that threshold into a copy of the current artifact, which then serves. The
threshold a router uses is, in order: ``LLMQ_ROUTER_LARGE_THRESHOLD`` when set, the
artifact's tuned threshold, the setting's default.
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any

from producer.router.artifact import current_artifact_path, load_artifact, save_artifact
from producer.router.frontier import OperatingPoint, frontier_from_json, pick_operating_point
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


def tune_router(
    folder: Path, frontier_data: dict[str, Any], *, max_quality_drop_points: float
) -> tuple[Path, OperatingPoint]:
    """Write the operating point's threshold into a copy of the current artifact and make
    it current; return its path and the point.

    Raises ``ConfigError`` when no router is trained, when the frontier was measured with
    another router (its scores would not mean the same), or when no point qualifies.
    """
    frontier = frontier_from_json(frontier_data)
    path = current_artifact_path(folder)
    if path is None:
        raise ConfigError("no router is trained on this host yet: run llmq router train")
    artifact = load_artifact(path)
    if frontier.router is not None and frontier.router != artifact.model_hash:
        raise ConfigError(
            f"the frontier was measured with router {frontier.router}, but the current one "
            f"is {artifact.model_hash}: run llmq bench routing again (--reuse-answers 1 "
            "re-scores the stored answers without engines)"
        )
    point = pick_operating_point(frontier, max_quality_drop_points=max_quality_drop_points)
    tuned = {**point.model_dump(mode="json"), "cases": frontier.cases}
    metadata = {**artifact.metadata, TUNED_KEY: tuned}
    written = save_artifact(replace(artifact, metadata=metadata), folder)
    return written, point


def tuned_threshold(metadata: dict[str, Any]) -> float | None:
    """The large threshold ``llmq router tune`` wrote into an artifact, if any."""
    tuned = metadata.get(TUNED_KEY)
    if isinstance(tuned, dict) and isinstance(tuned.get("threshold"), int | float):
        return float(tuned["threshold"])
    return None
