"""The layers of the design notes, enforced: who may import whom, and no GPU stack on load.

Every import statement in our packages is read from source (module level and inside
functions alike), so a lazy import cannot slip past. To move a package between layers,
edit ``LAYERS`` and ``MAY_IMPORT`` below; nothing else here names a package.
"""

from __future__ import annotations

import ast
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

# Module prefix -> layer; the longest matching prefix wins, so a subpackage can stand in
# a layer of its own. The benchmarks (``bench``) drive both sides, so they stand above
# producer and workers.
LAYERS: dict[str, str] = {
    "schemas": "schemas",
    "producer": "producer",
    "workers": "workers",
    "migrations": "migrations",
    "bench": "bench",
}

# Layer -> the module prefixes it may import (its own layer is always allowed).
# ``workers`` may use the producer's client to enqueue batch work, and nothing else of it.
MAY_IMPORT: dict[str, tuple[str, ...]] = {
    "schemas": (),
    "producer": ("schemas",),
    "workers": ("schemas", "producer.client"),
    "migrations": ("schemas",),
    "bench": ("schemas", "producer", "workers", "migrations"),
}

# Top-level packages whose source is checked.
CHECKED = ("schemas", "producer", "workers", "migrations", "bench")

# Heavy optional stacks a producer-only install (a backend service) does not have.
GPU_STACK = ("torch", "vllm")


def layer_of(module: str) -> str | None:
    """The layer ``module`` belongs to, or None for third-party and standard modules."""
    best: str | None = None
    for prefix in LAYERS:
        if (module == prefix or module.startswith(prefix + ".")) and (
            best is None or len(prefix) > len(best)
        ):
            best = prefix
    return None if best is None else LAYERS[best]


def module_name(path: Path) -> str:
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported_modules(path: Path) -> list[tuple[int, str]]:
    """``(line, module)`` for every import in ``path``, relative imports resolved."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    found: list[tuple[int, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = package.split(".")
                base = base[: len(base) - (node.level - 1)]
                target = ".".join([*base, node.module] if node.module else base)
            else:
                target = node.module or ""
            # ``from pkg import mod`` may name a submodule: check both.
            found.append((node.lineno, target))
            found += [(node.lineno, f"{target}.{alias.name}") for alias in node.names]
    return found


def source_files() -> list[Path]:
    return sorted(
        path
        for package in CHECKED
        if (ROOT / package).is_dir()
        for path in (ROOT / package).rglob("*.py")
        if "__pycache__" not in path.parts
    )


def allowed(importer_layer: str, module: str) -> bool:
    target = layer_of(module)
    if target is None or target == importer_layer:
        return True
    return any(
        module == prefix or module.startswith(prefix + ".") for prefix in MAY_IMPORT[importer_layer]
    ) and not (target == "bench" and importer_layer != "bench")


def test_every_checked_package_has_a_layer() -> None:
    for package in CHECKED:
        assert layer_of(package) is not None, package


def test_layers_import_only_what_they_may() -> None:
    violations = []
    for path in source_files():
        importer = layer_of(module_name(path))
        assert importer is not None, path
        for line, module in imported_modules(path):
            if not allowed(importer, module):
                rel = path.relative_to(ROOT)
                violations.append(f"{rel}:{line}: {importer} imports {module}")
    assert not violations, "layer violations:\n" + "\n".join(violations)


def test_the_contract_catches_a_violation() -> None:
    assert not allowed("producer", "workers.worker")
    assert not allowed("schemas", "producer.client")
    assert not allowed("workers", "producer.gateway.app")
    assert not allowed("workers", "bench.faults")
    assert not allowed("producer", "bench.cli")
    assert allowed("workers", "producer.client")
    assert allowed("bench", "workers.worker")
    assert allowed("bench", "producer.gateway.app")
    assert allowed("producer", "redis")


@pytest.mark.timeout(120)
def test_producer_and_schemas_load_without_the_gpu_stack() -> None:
    pytest.importorskip("fastapi")
    modules = [
        "schemas.settings",
        "schemas.tables",
        "producer",
        "producer.client",
        "producer.aio",
        "producer.cli",
        "producer.gateway.app",
        "producer.router.cli",
    ]
    code = (
        f"import importlib, sys\n"
        f"for name in {modules!r}:\n"
        f"    importlib.import_module(name)\n"
        f"loaded = sorted(m for m in {GPU_STACK!r} if m in sys.modules)\n"
        f"assert not loaded, f'loaded at import: {{loaded}}'\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=110,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
