"""The quiet start-up: engine output to a file, a few lines for a person."""

from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from schemas.queues import Tier
from schemas.registry import WorkerEntry
from workers.console import StartupView, explain_notes, output_to_file


def test_output_of_this_process_and_its_children_goes_to_the_file(tmp_path: Path) -> None:
    log = tmp_path / "engine.log"
    with output_to_file(log) as terminal:
        os.write(1, b"from fd 1\n")
        os.write(2, b"from fd 2\n")
        subprocess.run([sys.executable, "-c", "print('from a child')"], check=True)
        terminal.write("")  # the terminal stream is usable inside
    text = log.read_text()
    assert "from fd 1" in text
    assert "from fd 2" in text
    assert "from a child" in text


def test_off_a_terminal_each_phase_is_one_plain_line() -> None:
    out = io.StringIO()
    view = StartupView(out, prefix="llmq up")
    view.say("Redis found")
    view.warming("small worker")
    view.phase("loading")  # the same phase again: no new line
    view.phase("warm-up")
    view.phase("prefilling prompts")
    view.done()
    assert out.getvalue().splitlines() == [
        "llmq up: Redis found",
        "llmq up: small worker: loading",
        "llmq up: small worker: warm-up",
        "llmq up: small worker: prefilling prompts",
    ]


def test_known_harmless_warnings_are_named_once(tmp_path: Path) -> None:
    log = tmp_path / "up.log"
    log.write_text(
        "WARNING Triton is not installed. triton-cpu is expected on x86 CPUs.\n"
        "WARNING libtcmalloc is not found in LD_PRELOAD.\n"
        "WARNING libiomp is not found in LD_PRELOAD.\n"
    )
    note = explain_notes(log)
    assert note is not None
    assert "no Triton" in note
    assert note.count("tcmalloc") == 1
    (tmp_path / "clean.log").write_text("INFO all fine\n")
    assert explain_notes(tmp_path / "clean.log") is None


def test_a_warming_workers_phase_round_trips_through_the_registry() -> None:
    entry = WorkerEntry(worker_id="w", tier=Tier.SMALL, phase="warm-up")
    decoded = WorkerEntry.decode(entry.encode(), worker_id="w")  # type: ignore[arg-type]
    assert decoded is not None
    assert decoded.phase == "warm-up"
