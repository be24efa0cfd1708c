"""The newcomer's smoke run finds every documented command path, and stale ones."""

from __future__ import annotations

import argparse
import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from producer.cli import build_parser

SCRIPT = Path(__file__).resolve().parents[2] / "scripts" / "smoke_commands.py"


@pytest.fixture(scope="module")
def smoke() -> ModuleType:
    spec = importlib.util.spec_from_file_location("smoke_commands", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_paths_stop_where_the_words_stop_being_subcommands(smoke: ModuleType) -> None:
    tree = {"bench": {"report": {}, "mixed": {}}, "up": {}}
    text = (
        "run `llmq bench report --no-run`, then `llmq up --tiers all`; llmq does more\n"
        "```sh\n.venv/bin/llmq bench mixed --json\n```\n"
    )
    # Code only: inline spans and fenced blocks, never prose.
    assert smoke.documented_paths([text], tree) == {
        ("bench", "report"),
        ("up",),
        ("bench", "mixed"),
    }


def test_a_documented_command_that_does_not_exist_is_named(smoke: ModuleType) -> None:
    tree = {"bench": {}}
    assert smoke.unknown_paths(["`llmq benchmark peer`", "`llmq bench`"], tree) == {"benchmark"}


def test_the_tree_is_llmqs_own_parser(smoke: ModuleType) -> None:
    tree = smoke.command_tree(build_parser())
    assert {"submit", "up", "bench", "gateway"} <= set(tree)
    assert "report" in tree["bench"]
    assert isinstance(build_parser(), argparse.ArgumentParser)


def test_every_documented_command_exists(smoke: ModuleType) -> None:
    texts = list(smoke._docs())
    tree = smoke.command_tree(build_parser())
    assert smoke.unknown_paths(texts, tree) == set()
    assert len(smoke.documented_paths(texts, tree)) >= 30
