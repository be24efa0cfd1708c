"""Every command the README and docs/ document works after the README's first command.

Run by ``scripts/smoke`` (and by ``.ci/run`` right after ``scripts/setup``, before the
test tools are installed): each documented ``llmq`` command path must exist and answer
``--help`` without a traceback or a missing module, and the commands that need no
engine run for real. Exits non-zero naming every command that failed.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LLMQ = ROOT / ".venv" / "bin" / "llmq"
# `llmq bench report --no-run`, `llmq up --tiers ...`: inside backticks or a code block.
COMMAND = re.compile(r"\bllmq((?: [a-z][a-z-]*)+)")
BROKEN = ("Traceback (most recent call last)", "missing module")
FENCED = re.compile(r"```[a-z]*\n(.*?)```", re.DOTALL)
INLINE = re.compile(r"`([^`\n]+)`")


def code_of(text: str) -> list[str]:
    """The code in a Markdown text: fenced blocks, then inline spans outside them
    (prose such as "llmq does" names no command)."""
    blocks = FENCED.findall(text)
    return blocks + INLINE.findall(FENCED.sub("", text))


def documented_paths(texts: list[str], tree: dict[str, object]) -> set[tuple[str, ...]]:
    """The command paths (``("bench", "report")``) the texts name, cut where the words
    stop being subcommands of ``tree`` (a nested dict of subcommand names)."""
    paths: set[tuple[str, ...]] = set()
    for text in texts:
        for match in COMMAND.finditer("\n".join(code_of(text))):
            node: object = tree
            path: list[str] = []
            for word in match.group(1).split():
                if not isinstance(node, dict) or word not in node:
                    break
                path.append(word)
                node = node[word]
            if path:
                paths.add(tuple(path))
    return paths


def command_tree(parser: argparse.ArgumentParser) -> dict[str, object]:
    """Subcommand names of ``parser``, nested."""
    tree: dict[str, object] = {}
    for action in parser._actions:
        if isinstance(action, argparse._SubParsersAction):
            for name, sub in action.choices.items():
                tree[name] = command_tree(sub)
    return tree


def unknown_paths(texts: list[str], tree: dict[str, object]) -> set[str]:
    """First words after ``llmq `` that are no command at all (a doc gone stale)."""
    known = set(tree) | {"-h", "--help", "--log-level"}
    found = set()
    for text in texts:
        for match in COMMAND.finditer("\n".join(code_of(text))):
            first = match.group(1).split()[0]
            if first not in known:
                found.add(first)
    return found


def _docs() -> Iterator[str]:
    yield (ROOT / "README.md").read_text()
    for page in sorted((ROOT / "docs").rglob("*.md")):
        yield page.read_text()


def _run(args: list[str], env: dict[str, str]) -> str | None:
    """None when ``llmq args`` worked; else what went wrong, in one line."""
    done = subprocess.run(
        [str(LLMQ), *args], capture_output=True, text=True, env=env, timeout=300, check=False
    )
    output = done.stdout + done.stderr
    broken = next((marker for marker in BROKEN if marker in output), None)
    if done.returncode != 0 or broken:
        last = (output.strip().splitlines() or ["(no output)"])[-1]
        return f"exit {done.returncode}: {last}"
    return None


def main() -> int:
    sys.path.insert(0, str(ROOT))
    from producer.cli import build_parser

    texts = list(_docs())
    tree = command_tree(build_parser())
    failures = [
        f"llmq {word}: documented but no such command" for word in unknown_paths(texts, tree)
    ]
    paths = sorted(documented_paths(texts, tree))
    with tempfile.TemporaryDirectory() as scratch:
        # No shared state: a scratch database and cache, the default Redis untouched.
        env = {
            **os.environ,
            "LLMQ_DATABASE_URL": f"sqlite:///{scratch}/smoke.db",
            "LLMQ_MODEL_CACHE_DIR": os.environ.get(
                "LLMQ_MODEL_CACHE_DIR", str(Path("~/.cache/llmq").expanduser())
            ),
        }
        for path in paths:
            problem = _run([*path, "--help"], env)
            if problem:
                failures.append(f"llmq {' '.join(path)} --help: {problem}")
        # The committed results, drawn into a scratch copy (the folder stays as it is).
        results = Path(scratch) / "results"
        results.mkdir()
        for result in (ROOT / "docs" / "results").glob("*.json"):
            (results / result.name).write_text(result.read_text())
        real = [
            ["db", "upgrade"],
            ["route", "Where is my order?"],
            ["prompts", "list"],
            ["prompts", "lint", "support"],
            ["bench", "report", "--no-run", "--out", str(results)],
        ]
        for args in real:
            problem = _run(args, env)
            if problem:
                failures.append(f"llmq {' '.join(args)}: {problem}")
    print(f"smoke: {len(paths)} documented commands answered --help; {len(real)} ran for real")
    for failure in failures:
        print(f"smoke: FAILED {failure}", file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    raise SystemExit(main())
