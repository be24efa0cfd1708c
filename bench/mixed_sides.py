"""The sides of ``llmq bench mixed``: vLLM's own server (three ways a user runs it)
and the llmq stack, each started, measured and stopped one at a time."""

from __future__ import annotations

import contextlib
import itertools
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any

from bench.mixed_target import Target
from bench.redis_server import RedisServer, free_port
from schemas.prompt_registry import PromptRegistry
from schemas.queues import Tier
from schemas.settings import Settings

START_TIMEOUT_S = 900.0

VLLM_MODES = ("fcfs", "priority", "capped")
"""How a vLLM user sends the flood: as it comes (FCFS); with the request ``priority``
1 to the server's priority scheduling (interactive requests keep 0, which runs first);
or capped by the client to a fixed number of batch requests in flight."""
DEFAULT_FLOOD_CAP = 8


class Side:
    """A running server to replay against; ``restart`` kills and restarts its engine."""

    name: str
    target: Target
    tier: Tier
    tiers_served: list[str]

    def pids(self) -> list[int]:
        """The side's serving processes (their children are counted with them)."""
        return []

    def cpu_seconds_by_process(self) -> dict[str, float]:
        """CPU-seconds the side's serving processes and their children used so far, by
        process name (processes of one name are summed)."""
        return process_cpu_seconds_by_name(self.pids())

    def share(self) -> dict[str, int]:
        """What the side's own scheduler says of batch's share now (none for a server
        whose scheduling is not llmq's)."""
        return {}

    def start(self) -> None:
        """Start the server; returns once it serves."""
        raise NotImplementedError

    def stop(self) -> None:
        """Stop everything :meth:`start` started."""
        raise NotImplementedError

    def restart(self) -> float:
        """Kill the engine's process and start it again; seconds until it serves again."""
        raise NotImplementedError

    def cut_batch(self) -> None:
        """Drop batch work still waiting or running when the trace ends.

        A plain server aborts a request whose client left; that is the default.
        """


class VllmSide(Side):
    """vLLM's own OpenAI server on a fixed port (a restart comes back on the same one),
    sent the flood one of the :data:`VLLM_MODES` ways."""

    def __init__(
        self,
        settings: Settings,
        tier: Tier,
        scratch: Path,
        *,
        mode: str = "fcfs",
        flood_cap: int = DEFAULT_FLOOD_CAP,
    ) -> None:
        if mode not in VLLM_MODES:
            raise ValueError(f"unknown vLLM mode {mode!r}; use one of {', '.join(VLLM_MODES)}")
        self.name = f"vllm_{mode}"
        from bench.peer import vllm_flags
        from workers.engine.vllm import engine_arguments
        from workers.models import resolve_model

        config = settings.tier(tier)
        model_path = resolve_model(config.model, settings.bundled_model_dir)
        self.tier = tier
        self.tiers_served = [tier.value]
        self.port = free_port()
        self.model = Path(str(model_path)).name
        self.log = scratch / "vllm.log"
        self.command = [
            sys.executable,
            "-m",
            "vllm.entrypoints.openai.api_server",
            "--port",
            str(self.port),
            "--host",
            "127.0.0.1",
            "--served-model-name",
            self.model,
            "--disable-uvicorn-access-log",
            *vllm_flags(engine_arguments(str(model_path), config)),
        ]
        registry = PromptRegistry.load(settings.prompts_dir)
        self.target = Target(
            base_url=f"http://127.0.0.1:{self.port}",
            api_key="none",
            interactive_model=self.model,
            batch_model=self.model,
            inline_prompts=_prompt_texts(registry),
            batch_extra={"priority": 1} if mode == "priority" else {},
            batch_cap=flood_cap if mode == "capped" else None,
        )
        self.process: Any = None
        # A restart runs in its own thread: once stopped for good, nothing starts again.
        self._guard = threading.Lock()
        self._closed = False

    def pids(self) -> list[int]:
        process = self.process
        return [process.pid] if process is not None else []

    def start(self) -> None:
        from bench.peer import _wait_for

        with self._guard, self.log.open("ab") as log:
            if self._closed:
                raise RuntimeError("vLLM's server was stopped")
            process = subprocess.Popen(
                self.command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True
            )
            self.process = process
        _wait_for(self.target.base_url + "/v1/models", process)

    def stop(self, *, kill: bool = False) -> None:
        from bench.peer import _stop_group

        with self._guard:
            process, self.process = self.process, None
            self._closed = self._closed or not kill
        if process is None:
            return
        if kill:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(process.pid, signal.SIGKILL)
            process.wait()
        else:
            _stop_group(process)

    def restart(self) -> float:
        started = time.perf_counter()
        self.stop(kill=True)
        self.start()
        return time.perf_counter() - started


class LlmqSide(Side):
    """A private Redis, SQLite job database, one warm worker and ``llmq gateway``."""

    name = "llmq"

    def __init__(self, settings: Settings, scratch: Path, tier: Tier) -> None:
        self.tier = tier
        self.tiers_served = [self.tier.value]
        self.scratch = scratch
        self.redis = RedisServer(scratch)
        self.redis.start()
        self.settings = settings.model_copy(
            update={
                "broker_url": self.redis.url,
                "database_url": f"sqlite:///{scratch / 'mixed.db'}",
            }
        )
        # No trained router here: one worker serves one tier, so ``auto`` must land on it.
        router_dir = scratch / "no-router"
        router_dir.mkdir()
        self.env = {
            "LLMQ_ROUTER_DIR": str(router_dir),
            "LLMQ_DEFAULT_TIER": tier.value,
            # One API key sends the whole flood: its per-key caps would refuse it.
            "LLMQ_KEY_MAX_OPEN_STREAMS": "100000",
            "LLMQ_KEY_MAX_ACTIVE_JOBS": "100000",
        }
        self.worker: Any = None
        self.gateway: Any = None
        # A restart runs in its own thread: once stopped for good, nothing starts again.
        self._guard = threading.Lock()
        self._closed = False
        self.target = Target(
            base_url="",
            api_key="",
            interactive_model="auto",
            batch_model="auto",
            inline_prompts=None,
            batch_extra={"priority": "batch"},
        )

    def start(self) -> None:
        import migrations
        from producer.gateway.keys import create_key
        from schemas.db import make_engine, make_sessions

        migrations.upgrade(self.settings.database_url)
        self._start_worker()
        db = make_engine(self.settings.database_url)
        secret = create_key(make_sessions(db), "mixed-bench", rate_limit_per_min=10_000_000)[1]
        db.dispose()
        port = free_port()
        self.gateway = _start_gateway(self.settings, port, self.env, self.scratch)
        self.target = Target(
            base_url=f"http://127.0.0.1:{port}",
            api_key=secret,
            interactive_model="auto",
            batch_model="auto",
            inline_prompts=None,
            batch_extra={"priority": "batch"},
        )

    def _start_worker(self) -> None:
        from workers.supervise import start_worker_process, wait_until_warm

        with self._guard, (self.scratch / "worker.log").open("ab") as log:
            if self._closed:
                raise RuntimeError("the llmq stack was stopped")
            worker = start_worker_process(
                self.settings, self.tier, output=log, env=self.env, own_group=True
            )
            self.worker = worker
        wait_until_warm(self.settings, self.tier, worker, timeout=START_TIMEOUT_S)

    def restart(self) -> float:
        from workers.supervise import kill_group

        started = time.perf_counter()
        with self._guard:
            worker, self.worker = self.worker, None
        if worker is not None:
            kill_group(worker)
        self._start_worker()
        return time.perf_counter() - started

    def pids(self) -> list[int]:
        processes = [self.worker, self.gateway]
        pids = [p.pid for p in processes if p is not None]
        return pids + self.redis.pids()

    def share(self) -> dict[str, int]:
        # As of the worker's last heartbeat (a few seconds): enough for counts of cuts.
        import redis

        from schemas.registry import read_entries

        client = redis.Redis.from_url(self.settings.broker_url)
        try:
            entries = read_entries(client)
        except redis.RedisError:
            return {}
        finally:
            client.close()
        figures: dict[str, int] = {}
        for entry in entries:
            if entry.batch_share_cuts is not None:
                figures["batch_share_cuts"] = entry.batch_share_cuts
            if entry.batch_under_interactive is not None:
                figures["batch_under_interactive"] = entry.batch_under_interactive
        return figures

    def cut_batch(self) -> None:
        # The gateway does not cancel a job whose stream was closed (a reader may come
        # back): the bulk job's owner cancels what is left, as vLLM's clients left.
        from sqlalchemy import select

        from producer.client import Client
        from schemas.jobs import JobStatus
        from schemas.queues import Priority
        from schemas.tables import Job

        open_statuses = (JobStatus.QUEUED.value, JobStatus.RUNNING.value)
        with Client(self.settings, warm=False) as client:
            with client.sessions() as session:
                ids = session.scalars(
                    select(Job.id).where(
                        Job.priority == Priority.BATCH.value, Job.status.in_(open_statuses)
                    )
                ).all()
            for job_id in ids:
                with contextlib.suppress(Exception):
                    client.cancel(job_id)

    def stop(self) -> None:
        from workers.supervise import stop_process

        with self._guard:
            self._closed = True
            worker, self.worker = self.worker, None
        if self.gateway is not None:
            stop_process(self.gateway, grace_s=10)
        if worker is not None:
            stop_process(worker)
        self.redis.stop()


def _start_gateway(settings: Settings, port: int, env: dict[str, str], scratch: Path) -> Any:
    import httpx

    variables = {
        **os.environ,
        "LLMQ_BROKER_URL": settings.broker_url,
        "LLMQ_DATABASE_URL": settings.database_url,
        **env,
    }
    command = [sys.executable, "-m", "producer.cli", "gateway", "--port", str(port)]
    with (scratch / "gateway.log").open("ab") as log:
        process = subprocess.Popen(command, env=variables, stdout=log, stderr=subprocess.STDOUT)
    deadline = time.monotonic() + 60
    while True:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200:
                return process
        if time.monotonic() > deadline or process.poll() is not None:
            process.kill()
            raise RuntimeError("the gateway did not start")
        time.sleep(0.2)


def _prompt_texts(registry: PromptRegistry) -> dict[str, str]:
    from bench.trace import SUMMARY_PROMPT, SUPPORT_PROMPT

    return {ref: registry.resolve(ref).text for ref in (SUPPORT_PROMPT, SUMMARY_PROMPT)}


def process_cpu_seconds_by_name(pids: list[int]) -> dict[str, float]:
    """User and system CPU-seconds of ``pids`` and their living children, by process
    name (a process that ended is left out: read this before stopping anything)."""
    import psutil

    by_name: dict[str, float] = {}
    for pid in pids:
        with contextlib.suppress(psutil.Error):
            root = psutil.Process(pid)
            for process in [root, *root.children(recursive=True)]:
                with contextlib.suppress(psutil.Error):
                    times = process.cpu_times()
                    name = _process_label(process)
                    by_name[name] = by_name.get(name, 0.0) + times.user + times.system
    return by_name


def _process_label(process: Any) -> str:
    """A short name for a serving process: its title (vLLM names its engine process)
    or, for a Python process, the module or program it runs."""
    name = str(process.name())
    if not name.startswith("python"):
        return name
    arguments = process.cmdline()
    for flag, value in itertools.pairwise(arguments):
        if flag == "-m":
            return str(value)
    programs = [Path(argument).name for argument in arguments[1:2]]
    return programs[0] if programs else name
