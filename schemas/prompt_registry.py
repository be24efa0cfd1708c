"""Registered system prompts, by name and version.

A prompt is a file ``<name>@<version>.txt``. Files directly in a prompts folder serve
every tier; files in a ``<tier>/`` subfolder serve only that tier. Workers prefill every
prompt they serve before they take work, except those in a ``lazy/`` subfolder (every
tier, cached by their first request): a long prompt few requests use should not
lengthen every worker's start. The bundled folder
(``schemas/prompts``) is always loaded; a deployment adds its own with
``LLMQ_PROMPTS_DIR``. A request names ``support`` or ``support@3``; the producer pins
the exact version on the job, and the worker renders that file's text byte for byte,
so every request of a prompt shares one cached prefix.

What a bare name resolves to: its newest version, unless a ``<name>.pin`` file in a
prompts folder holds a version number (a later folder's pin wins). A pin lets a new
version be registered, prefilled and compared before it serves the bare name.
"""

from __future__ import annotations

import hashlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

from schemas.errors import ConfigError, InvalidRequest
from schemas.queues import Tier

BUNDLED_PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
FILE_PATTERN = re.compile(r"^(?P<name>[a-z0-9][a-z0-9_-]*)@(?P<version>[0-9]+)\.txt$")
LAZY_FOLDER = "lazy"
PIN_PATTERN = re.compile(r"^(?P<name>[a-z0-9][a-z0-9_-]*)\.pin$")


class UnknownPrompt(InvalidRequest):
    """The request names a system prompt that is not registered (for its tier)."""


@dataclass(frozen=True)
class SystemPrompt:
    """One version of a registered system prompt."""

    name: str
    version: int
    text: str
    tiers: frozenset[Tier]
    prefill: bool = True
    """Whether a worker prefills it before taking work (False: cached on first use)."""

    @property
    def ref(self) -> str:
        """``name@version``, the pinned reference stored on a job."""
        return f"{self.name}@{self.version}"


class PromptRegistry:
    """Every registered prompt; immutable once loaded."""

    def __init__(
        self, prompts: Iterable[SystemPrompt], *, pins: Mapping[str, int] | None = None
    ) -> None:
        self.pins: dict[str, int] = dict(pins or {})
        self._by_ref: dict[str, SystemPrompt] = {}
        for prompt in prompts:
            known = self._by_ref.get(prompt.ref)
            if known is not None and known.text != prompt.text:
                raise ConfigError(f"system prompt {prompt.ref} is defined twice, differently")
            self._by_ref[prompt.ref] = prompt
        for name, version in self.pins.items():
            if f"{name}@{version}" not in self._by_ref:
                raise ConfigError(f"{name}.pin names {name}@{version}, which is not registered")

    @classmethod
    def load(cls, extra_dir: Path | None = None) -> PromptRegistry:
        """The bundled prompts plus those in ``extra_dir``; raises ``ConfigError``."""
        folders = [BUNDLED_PROMPTS_DIR] + ([extra_dir.expanduser()] if extra_dir else [])
        prompts = [prompt for folder in folders for prompt in _read_folder(folder)]
        pins = {name: version for folder in folders for name, version in _read_pins(folder)}
        return cls(prompts, pins=pins)

    def resolve(self, name: str, *, tier: Tier | None = None) -> SystemPrompt:
        """The prompt ``name`` (pinned, else newest version) or ``name@version``.

        Raises ``UnknownPrompt``.
        """
        base, _, version = name.partition("@")
        candidates = [
            prompt
            for prompt in self._by_ref.values()
            if prompt.name == base
            and (not version or str(prompt.version) == version)
            and (tier is None or tier in prompt.tiers)
        ]
        if not candidates:
            where = f" for the {tier} tier" if tier else ""
            known = ", ".join(sorted(self._by_ref)) or "none"
            raise UnknownPrompt(f"unknown system prompt {name!r}{where} (registered: {known})")
        pinned = [p for p in candidates if not version and self.pins.get(base) == p.version]
        return pinned[0] if pinned else max(candidates, key=lambda prompt: prompt.version)

    def all(self) -> list[SystemPrompt]:
        """Every registered version, sorted by name, then version."""
        return sorted(self._by_ref.values(), key=lambda p: (p.name, p.version))

    def for_tier(self, tier: Tier) -> list[SystemPrompt]:
        """Every prompt a worker of ``tier`` serves, sorted by reference."""
        return sorted((p for p in self._by_ref.values() if tier in p.tiers), key=lambda p: p.ref)

    def to_prefill(self, tier: Tier) -> list[SystemPrompt]:
        """The prompts a worker of ``tier`` prefills before it takes work."""
        return [prompt for prompt in self.for_tier(tier) if prompt.prefill]

    def fingerprint(self) -> str:
        """Changes whenever any prompt is added, removed or edited."""
        digest = hashlib.sha256()
        for ref in sorted(self._by_ref):
            prompt = self._by_ref[ref]
            digest.update(f"{ref}|{sorted(prompt.tiers)}|{prompt.prefill}|".encode())
            digest.update(prompt.text.encode())
        digest.update(repr(sorted(self.pins.items())).encode())
        return digest.hexdigest()[:16]


class PromptCatalog:
    """The current registry, re-read from disk when asked; a new version goes live at once."""

    def __init__(self, extra_dir: Path | None = None) -> None:
        self._extra_dir = extra_dir
        self.registry = PromptRegistry.load(extra_dir)

    def reload(self) -> bool:
        """Re-read the folders; return True if any prompt changed. Keeps the old on error."""
        fresh = PromptRegistry.load(self._extra_dir)
        changed = fresh.fingerprint() != self.registry.fingerprint()
        self.registry = fresh
        return changed


def _read_folder(folder: Path) -> list[SystemPrompt]:
    if not folder.is_dir():
        raise ConfigError(f"prompts folder {folder} does not exist")
    prompts = _read_files(folder.glob("*.txt"), frozenset(Tier))
    for tier in Tier:
        prompts += _read_files((folder / tier.value).glob("*.txt"), frozenset({tier}))
    prompts += _read_files((folder / LAZY_FOLDER).glob("*.txt"), frozenset(Tier), prefill=False)
    return prompts


def _read_pins(folder: Path) -> list[tuple[str, int]]:
    pins = []
    for path in sorted(folder.glob("*.pin")):
        match = PIN_PATTERN.match(path.name)
        text = path.read_text(encoding="utf-8").strip()
        if match is None or not text.isdigit():
            raise ConfigError(f"pin file {path} must be <name>.pin holding a version number")
        pins.append((match["name"], int(text)))
    return pins


def _read_files(
    paths: Iterable[Path], tiers: frozenset[Tier], *, prefill: bool = True
) -> list[SystemPrompt]:
    prompts = []
    for path in sorted(paths):
        match = FILE_PATTERN.match(path.name)
        if match is None:
            raise ConfigError(f"prompt file {path.name} is not named <name>@<version>.txt")
        text = path.read_text(encoding="utf-8")
        if not text.strip():
            raise ConfigError(f"prompt file {path} is empty")
        prompts.append(
            SystemPrompt(
                match["name"], int(match["version"]), text.rstrip("\n"), tiers, prefill=prefill
            )
        )
    return prompts
