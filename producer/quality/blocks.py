"""One variant's block: its worker up (started here if none is), then down again.

On a small CPU host two vLLM engines slow each other even when they take turns (their
idle threads spin), so the gate runs A's cases with only A's engine up, then
B's with only B's. A worker is started as ``llmq worker --tier T`` in a child process
(the producer never imports the workers package) and stopped when its block ends; a
worker that was already serving the tier is used as it is and left running.
"""

from __future__ import annotations

import contextlib
import json
import os
import subprocess
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Literal

from producer.status import live_workers
from schemas.boundary import broker_boundary
from schemas.broker import redis_client
from schemas.errors import EngineError, NoWarmWorker
from schemas.queues import Tier
from schemas.settings import Settings
from schemas.worker_process import start_worker_process, stop_process

Spawn = Literal["auto", "never"]
# Not a setting: the grace of the gate's own workers, stopped after its cases ran.
STOP_GRACE_S = 60.0
LOG_LINES_SHOWN = 5


def _workers(settings: Settings) -> list[tuple[Tier, str, bool]]:
    client = redis_client(settings.broker_url)
    try:
        with broker_boundary("read the worker registry"):
            return [(w.tier, w.worker_id, w.warm) for w in live_workers(client)]
    finally:
        client.close()


ENGINE_MARKERS = (b"producer.cli\x00worker", b"vllm.entrypoints")


def host_engine_pids() -> set[int]:
    """Processes on this host that hold an engine (llmq workers of any broker, vLLM
    servers): the registry sees only this broker's workers, the host sees them all."""
    pids = set()
    for entry in Path("/proc").glob("[0-9]*"):
        try:
            command = (entry / "cmdline").read_bytes()
        except OSError:
            continue
        if any(marker in command for marker in ENGINE_MARKERS):
            pids.add(int(entry.name))
    return pids


def other_engines(settings: Settings, tier: Tier) -> int:
    """Engines up beside ``tier``'s: other tiers' workers on this broker, or any engine
    process on this host that is not a worker of ``tier`` on this broker."""
    own = {
        int(wid.split("@")[-2].rsplit("-", 2)[1])
        for name, wid, _ in _workers(settings)
        if name == tier and "@" in wid
    }
    on_broker = sum(1 for name, _, _ in _workers(settings) if name != tier)
    return max(on_broker, len(host_engine_pids() - own - {os.getpid()}))


@contextlib.contextmanager
def worker_block(
    settings: Settings,
    tier: Tier,
    *,
    spawn: Spawn = "auto",
    say: Callable[[str], None] = lambda _line: None,
) -> Iterator[None]:
    """A warm worker serves ``tier`` inside the block.

    With ``spawn="auto"`` a worker is started (and stopped after) when none is warm;
    with ``"never"`` the block raises ``NoWarmWorker`` instead. Raises ``EngineError``
    when the started worker exits or does not warm up, with the last lines it wrote.
    """
    if any(name == tier and warm for name, _, warm in _workers(settings)):
        yield
        return
    if spawn == "never":
        raise NoWarmWorker(f"no warm worker serves {tier}; start one: llmq worker --tier {tier}")
    with tempfile.TemporaryDirectory(prefix="llmq-ab-") as folder:
        log_path = Path(folder) / "worker.log"
        with log_path.open("wb") as log:
            say(f"starting a worker for {tier} (its engine loads and warms up)...")
            process = start_worker_process(
                settings,
                tier,
                output=log,
                env=worker_environment(settings),
                # The tier table goes whole, in LLMQ_TIERS.
                unset=("LLMQ_TIERS_FILE",),
                stdin=subprocess.DEVNULL,
            )
            try:
                started = time.monotonic()
                _wait_warm(settings, tier, process, log_path)
                say(f"{tier} is warm after {time.monotonic() - started:.0f} s")
                yield
            finally:
                # SIGTERM: the worker finishes what it runs and leaves the registry.
                stop_process(process, grace_s=STOP_GRACE_S)


def worker_environment(settings: Settings) -> dict[str, str]:
    """What the child worker's environment sets beside this one's and the broker and
    database that ``start_worker_process`` sets: the whole tier table, a quiet log, and
    no prefilling of system prompts.

    The tier table goes whole (``LLMQ_TIERS``, with no tiers file), so a variant
    configured in code or from a file here is the same variant there. A block's worker
    answers quality cases, which carry their own messages and name no registered
    prompt: prefilling the tier's prompts would only delay the block (seconds per
    prompt on a CPU).
    """
    tiers = {str(name): config.model_dump(mode="json") for name, config in settings.tiers.items()}
    env = {
        "LLMQ_TIERS": json.dumps(tiers),
        "LLMQ_LOG_LEVEL": os.environ.get("LLMQ_LOG_LEVEL", "WARNING"),
        "LLMQ_PREFILL_PROMPTS": "0",
    }
    if settings.prompts_dir is not None:
        env["LLMQ_PROMPTS_DIR"] = str(settings.prompts_dir)
    return env


def _wait_warm(
    settings: Settings, tier: Tier, process: subprocess.Popen[bytes], log_path: Path
) -> None:
    prefix = f"{tier.value}-{process.pid}-"
    warm_s = settings.timeouts.worker_warm_s
    deadline = time.monotonic() + warm_s
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise EngineError(
                f"the worker for {tier} exited with code {process.returncode}: "
                + _last_lines(log_path)
            )
        if any(wid.startswith(prefix) and warm for _, wid, warm in _workers(settings)):
            return
        time.sleep(0.5)
    raise EngineError(f"the worker for {tier} was not warm after {warm_s:.0f} s")


def _last_lines(path: Path) -> str:
    lines = [line for line in path.read_text(errors="replace").splitlines() if line.strip()]
    errors = [line for line in lines if "error" in line.lower()]
    return " | ".join((errors or lines)[-LOG_LINES_SHOWN:]) or "(no output)"
