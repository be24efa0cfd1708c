"""No Python file in the tree is over ``MAX_LINES`` lines: past that a module holds
more than one thing, and a reader loses its shape. Split it along a real seam."""

from __future__ import annotations

import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 600


def tracked_python_files() -> list[Path]:
    """Every ``.py`` file git tracks (a virtual environment is never tracked); outside
    a git checkout, every one below the root but in hidden folders and ``.venv``."""
    try:
        listed = subprocess.run(
            ["git", "ls-files", "-z", "--", "*.py"],
            cwd=ROOT,
            capture_output=True,
            check=True,
        ).stdout.decode()
    except (OSError, subprocess.CalledProcessError):
        return [
            path
            for path in ROOT.rglob("*.py")
            if not any(part.startswith(".") for part in path.relative_to(ROOT).parts)
        ]
    paths = [ROOT / name for name in listed.split("\0") if name]
    return [path for path in paths if path.is_file()]  # deleted but not yet committed


def test_the_tree_is_listed() -> None:
    names = {path.relative_to(ROOT).as_posix() for path in tracked_python_files()}
    assert "producer/client.py" in names
    assert not any(name.startswith(".venv/") for name in names)


def test_no_python_file_is_over_the_limit() -> None:
    too_long = {}
    for path in tracked_python_files():
        with path.open("rb") as source:
            lines = sum(1 for _ in source)
        if lines > MAX_LINES:
            too_long[path.relative_to(ROOT).as_posix()] = lines
    assert too_long == {}, f"over {MAX_LINES} lines (split each along a real seam): {too_long}"
