"""Writing prompt versions and pins to the deployment's prompts folder.

A version is a file ``<name>@<version>.txt``, never rewritten once there; a pin is
``<name>.pin`` holding the version a bare name resolves to (see
:mod:`schemas.prompt_registry`). Both are written to a temporary file and renamed,
so a worker or producer re-reading the folder never sees half a file.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from schemas.errors import ConfigError
from schemas.prompt_registry import PromptRegistry, SystemPrompt
from schemas.queues import Tier
from schemas.settings import Settings


def prompts_folder(settings: Settings) -> Path:
    """The folder new versions go to; raises ``ConfigError`` when none is configured."""
    if settings.prompts_dir is None:
        raise ConfigError(
            "new prompt versions are written to LLMQ_PROMPTS_DIR; set it to a folder that "
            "workers and producers share"
        )
    folder = settings.prompts_dir.expanduser()
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def register_version(
    folder: Path, registry: PromptRegistry, base: SystemPrompt, text: str
) -> SystemPrompt:
    """Write ``text`` as the next version of ``base.name``, for the same tiers as ``base``.

    What the bare name resolves to does not change: if no pin holds it yet, the version
    it resolves to now is pinned first.
    """
    name = base.name
    current = registry.resolve(name)
    if name not in registry.pins:
        write_pin(folder, name, current.version)
    version = max(p.version for p in registry.all() if p.name == name) + 1
    tiers = sorted(base.tiers)
    targets = [folder] if base.tiers == frozenset(Tier) else [folder / t.value for t in tiers]
    for target in targets:
        target.mkdir(parents=True, exist_ok=True)
        _write_atomically(target / f"{name}@{version}.txt", text.rstrip("\n") + "\n")
    return SystemPrompt(name, version, text.rstrip("\n"), base.tiers)


def write_pin(folder: Path, name: str, version: int) -> None:
    """Make the bare ``name`` resolve to ``name@version``."""
    _write_atomically(folder / f"{name}.pin", f"{version}\n")


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    try:
        with os.fdopen(handle, "w", encoding="utf-8") as out:
            out.write(text)
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise
