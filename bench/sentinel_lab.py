"""A private Redis Sentinel group for failover tests and the fault benchmark.

One master, one replica (``--replicaof``) and three sentinels (``redis-server
sentinel.conf --sentinel``), all on free loopback ports, none persistent, each with its
own scratch folder: a test may kill the master, never a shared Redis. Sentinels
declare the master down after a second and fail over with a quorum of two.

:func:`failover_phase` is the fault benchmark's failover round: it kills the master
under load and counts what was lost.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import shutil
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

import redis

from bench.redis_server import free_port, wait_for_ping
from producer.client import Client
from schemas.errors import BrokerUnavailable, LlmqError
from schemas.events import AnyEvent, FinalEvent, is_terminal, parse_event
from schemas.jobs import JobStatus
from schemas.queues import Tier, event_log_key
from schemas.settings import Settings

log = logging.getLogger(__name__)

MASTER_NAME = "mymaster"
DOWN_AFTER_MS = 1000
FAILOVER_TIMEOUT_MS = 5000
START_TIMEOUT_S = 15.0
PROMOTION_TIMEOUT_S = 30.0
JOB_TIMEOUT_S = 300.0


def _redis_server() -> str:
    binary = shutil.which("redis-server")
    if binary is None:
        raise RuntimeError("redis-server is not installed")
    return binary


class _Node:
    """One ``redis-server`` process (data node or sentinel) on a free loopback port."""

    def __init__(self, name: str, command: list[str], port: int, log_path: Path) -> None:
        self.name = name
        self.port = port
        self._command = command
        self._log_path = log_path
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> None:
        with self._log_path.open("ab") as output:
            self._process = subprocess.Popen(self._command, stdout=output, stderr=subprocess.STDOUT)

    @property
    def alive(self) -> bool:
        return self._process is not None and self._process.poll() is None

    def client(self, **kwargs: Any) -> redis.Redis:
        return redis.Redis(host="127.0.0.1", port=self.port, socket_timeout=2.0, **kwargs)

    def kill(self) -> None:
        """SIGKILL, as a crash would; no shutdown, no last write."""
        if self._process is not None:
            with contextlib.suppress(ProcessLookupError):
                self._process.kill()
            self._process.wait(timeout=10)
            self._process = None

    def wait_until_up(self, timeout_s: float) -> None:
        client = self.client()
        try:
            wait_for_ping(client, timeout_s=timeout_s, alive=self._alive)
        finally:
            client.close()

    def _alive(self) -> None:
        if self._process is not None and self._process.poll() is not None:
            raise RuntimeError(f"{self.name} exited; see {self._log_path}")


class SentinelLab:
    """A master, a replica and three sentinels monitoring them as ``mymaster``.

    Use :func:`sentinel_lab` to get one that is started and torn down for you.
    """

    def __init__(self, workdir: Path, *, sentinels: int = 3) -> None:
        self.workdir = workdir
        binary = _redis_server()
        master_port, replica_port = free_port(), free_port()
        self.data_nodes = [
            self._data_node(binary, "master", master_port, replicaof=None),
            self._data_node(binary, "replica", replica_port, replicaof=master_port),
        ]
        self.sentinels = [self._sentinel(binary, index, master_port) for index in range(sentinels)]
        self.master_port = master_port

    @property
    def url(self) -> str:
        """The broker URL through every sentinel, in the form Celery and llmq share."""
        entries = ";".join(f"sentinel://127.0.0.1:{node.port}" for node in self.sentinels)
        return f"{entries}/0?master_name={MASTER_NAME}"

    @property
    def master(self) -> _Node:
        """The data node that is master now (as the lab last saw it)."""
        return self._node_on(self.master_port)

    def start(self) -> None:
        """Start every process; return once the sentinels know the replica and each other."""
        try:
            for node in self.data_nodes:
                node.start()
                node.wait_until_up(START_TIMEOUT_S)
            for sentinel in self.sentinels:
                sentinel.start()
            for sentinel in self.sentinels:
                sentinel.wait_until_up(START_TIMEOUT_S)
            self._wait_until_ready(START_TIMEOUT_S)
        except BaseException:
            self.stop()
            raise

    def stop(self) -> None:
        """Kill every process the lab started."""
        for node in [*self.sentinels, *self.data_nodes]:
            node.kill()

    def wait_replicated(self, timeout_s: float = 5.0) -> int:
        """Block until every write so far reached the replicas; return how many did.

        Redis replicates asynchronously: a write the master took but no replica got
        dies with the master. Tests call this before a kill to know what must survive.
        """
        client = self.master.client()
        try:
            return int(client.execute_command("WAIT", 1, int(timeout_s * 1000)))  # type: ignore[no-untyped-call]
        finally:
            client.close()

    def kill_master(self) -> int:
        """SIGKILL the current master; return the port it listened on."""
        victim = self.master
        victim.kill()
        return victim.port

    def wait_promoted(self, old_port: int, timeout_s: float = PROMOTION_TIMEOUT_S) -> int:
        """Block until the sentinels name a new master and it takes writes; its port.

        Raises ``TimeoutError`` if no replica is promoted within ``timeout_s``.
        """
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            port = self._agreed_master_port()
            if port is not None and port != old_port and self._is_master(port):
                self.master_port = port
                return port
            time.sleep(0.1)
        raise TimeoutError(f"no replica was promoted within {timeout_s:.0f} s")

    def _agreed_master_port(self) -> int | None:
        """The master's port if a majority of live sentinels name the same one."""
        votes: dict[int, int] = {}
        for sentinel in self.sentinels:
            if not sentinel.alive:
                continue
            client = sentinel.client()
            try:
                address = client.execute_command(  # type: ignore[no-untyped-call]
                    "SENTINEL", "get-master-addr-by-name", MASTER_NAME
                )
            except redis.RedisError:
                continue
            finally:
                client.close()
            if address:
                port = int(address[1])
                votes[port] = votes.get(port, 0) + 1
        for port, count in votes.items():
            if count * 2 > len(self.sentinels):
                return port
        return None

    def _is_master(self, port: int) -> bool:
        client = self._node_on(port).client()
        try:
            return bool(client.info("replication").get("role") == "master")
        except redis.RedisError:
            return False
        finally:
            client.close()

    def _node_on(self, port: int) -> _Node:
        for node in self.data_nodes:
            if node.port == port:
                return node
        raise LookupError(f"no data node of this lab listens on port {port}")

    def _wait_until_ready(self, timeout_s: float) -> None:
        # A failover needs a replica the sentinels know of and a quorum that knows its
        # peers (learnt over the master's hello channel, every two seconds), and a
        # replica that has finished its first sync: one still loading the master's
        # snapshot (slow on a busy host) would be promoted with none of what the master
        # took meanwhile, and every job queued before the kill would be gone.
        deadline = time.monotonic() + timeout_s
        others = len(self.sentinels) - 1
        while True:
            if self._replica_online() and all(
                self._sentinel_ready(sentinel, others) for sentinel in self.sentinels
            ):
                return
            if time.monotonic() > deadline:
                raise TimeoutError(
                    "the replica did not finish its first sync, or the sentinels did not "
                    "discover it and each other"
                )
            time.sleep(0.1)

    def _replica_online(self) -> bool:
        """Whether the master counts a replica that is through its first sync."""
        client = self.master.client(decode_responses=True)
        try:
            replication = client.info("replication")
        except redis.RedisError:
            return False
        finally:
            client.close()
        replicas = [v for k, v in replication.items() if k.startswith("slave")]
        return any(isinstance(r, dict) and r.get("state") == "online" for r in replicas)

    @staticmethod
    def _sentinel_ready(sentinel: _Node, others: int) -> bool:
        client = sentinel.client(decode_responses=True)
        try:
            state = client.execute_command(  # type: ignore[no-untyped-call]
                "SENTINEL", "MASTER", MASTER_NAME
            )
        except redis.RedisError:
            return False
        finally:
            client.close()
        fields = _as_dict(state)
        return (
            int(fields.get("num-slaves", 0)) >= 1
            and int(fields.get("num-other-sentinels", 0)) >= others
        )

    def _data_node(self, binary: str, name: str, port: int, *, replicaof: int | None) -> _Node:
        folder = self.workdir / name
        folder.mkdir(parents=True, exist_ok=True)
        command = [binary, "--port", str(port), "--bind", "127.0.0.1", "--dir", str(folder)]
        command += ["--save", "", "--appendonly", "no"]
        # Diskless sync: the replica is in sync well before the sentinels are ready.
        command += ["--repl-diskless-sync", "yes", "--repl-diskless-sync-delay", "0"]
        if replicaof is not None:
            command += ["--replicaof", "127.0.0.1", str(replicaof)]
        return _Node(name, command, port, self.workdir / f"{name}.log")

    def _sentinel(self, binary: str, index: int, master_port: int) -> _Node:
        port = free_port()
        folder = self.workdir / f"sentinel-{index}"
        folder.mkdir(parents=True, exist_ok=True)
        config = folder / "sentinel.conf"  # sentinels rewrite their config: one each
        config.write_text(
            "\n".join(
                [
                    f"port {port}",
                    "bind 127.0.0.1",
                    f"dir {folder}",
                    f"sentinel monitor {MASTER_NAME} 127.0.0.1 {master_port} 2",
                    f"sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}",
                    f"sentinel failover-timeout {MASTER_NAME} {FAILOVER_TIMEOUT_MS}",
                    f"sentinel parallel-syncs {MASTER_NAME} 1",
                    "",
                ]
            )
        )
        command = [binary, str(config), "--sentinel"]
        return _Node(f"sentinel-{index}", command, port, self.workdir / f"sentinel-{index}.log")


def _as_dict(state: Any) -> dict[str, Any]:
    if isinstance(state, dict):
        return state
    items = list(state or [])
    return dict(zip(items[::2], items[1::2], strict=False))


@contextlib.contextmanager
def sentinel_lab(workdir: Path | None = None) -> Iterator[SentinelLab]:
    """A started :class:`SentinelLab`; every process is killed on the way out."""
    with contextlib.ExitStack() as stack:
        if workdir is None:
            workdir = Path(
                stack.enter_context(tempfile.TemporaryDirectory(prefix="llmq-sentinel-"))
            )
        lab = SentinelLab(workdir)
        lab.start()
        stack.callback(lab.stop)
        yield lab


class FailoverLab(Protocol):
    """What :func:`failover_phase` needs: settings on the sentinel URL, and the group.

    ``settings.broker_url`` must be ``sentinels.url``, and workers of ``tier`` must be
    serving on it.
    """

    settings: Settings
    sentinels: SentinelLab


@dataclass
class FailoverReport:
    """The failover round's counts; the fault benchmark reports them under these names.

    ``failovers``: masters killed and replaced. ``failover_jobs_lost``: jobs whose
    ``submit`` succeeded that did not end done. ``failover_duplicate_results``: extra
    terminal events in a job's replay log (a job that ran to the end twice).
    ``failover_stream_gaps``: sequence numbers a reader following a job across the
    failover never got, plus numbers it got twice. ``refused``: submits refused with
    ``BrokerUnavailable`` during the switch (refused, not lost).
    """

    failovers: int = 0
    acknowledged: int = 0
    refused: int = 0
    failover_jobs_lost: int = 0
    failover_duplicate_results: int = 0
    failover_stream_gaps: int = 0
    job_ids: list[str] = field(default_factory=list)

    def figures(self) -> dict[str, int]:
        """The fields ``llmq bench faults --json`` adds for this round."""
        return {
            "failovers": self.failovers,
            "failover_jobs_lost": self.failover_jobs_lost,
            "failover_duplicate_results": self.failover_duplicate_results,
            "failover_stream_gaps": self.failover_stream_gaps,
            "failover_acknowledged": self.acknowledged,
            "failover_refused": self.refused,
        }


class StreamFollower:
    """Reads one job's whole stream in a thread, from 0 to its terminal event."""

    def __init__(self, client: Client, job_id: str, *, timeout_s: float) -> None:
        self.job_id = job_id
        self.events: list[AnyEvent] = []
        self.error: str | None = None
        self._client = client
        self._timeout_s = timeout_s
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()

    def join(self, timeout_s: float) -> None:
        self._thread.join(timeout_s)

    def _run(self) -> None:
        try:
            for event in self._client.events(self.job_id, timeout=self._timeout_s):
                self.events.append(event)
        except LlmqError as exc:
            self.error = f"{exc.__class__.__name__}: {exc}"

    @property
    def finished(self) -> bool:
        return bool(self.events) and is_terminal(self.events[-1])

    def gaps(self) -> int:
        """Numbers missing between 0 and the last event, plus numbers seen twice."""
        return count_gaps([event.seq for event in self.events])


def count_gaps(seqs: list[int]) -> int:
    """Missing and repeated sequence numbers in what one reader got (0 when perfect)."""
    if not seqs:
        return 0
    missing = len(set(range(max(seqs) + 1)) - set(seqs))
    repeated = len(seqs) - len(set(seqs))
    out_of_order = sum(1 for before, after in itertools.pairwise(seqs) if after < before)
    return missing + repeated + out_of_order


def terminal_events(raw_events: list[Any]) -> int:
    """How many terminal events a replay log holds (1 for a job that ended once)."""
    return sum(is_terminal(parse_event(raw)) for raw in raw_events)


def failover_phase(
    lab: FailoverLab,
    client: Client,
    *,
    jobs: int,
    max_tokens: int,
    tier: Tier = Tier.SMALL,
    pace_s: float = 0.1,
    job_timeout_s: float = JOB_TIMEOUT_S,
) -> FailoverReport:
    """Submit ``jobs`` jobs at a steady pace, SIGKILL the Redis master half way.

    Every accepted job has a reader following its stream from the start. Submits
    refused with ``BrokerUnavailable`` while the sentinels promote the replica are
    counted as refused; every job ``submit`` accepted must end done, with exactly one
    terminal event in its log and no gap in what its reader saw.

    Returns a :class:`FailoverReport` whose :meth:`~FailoverReport.figures` are
    ``failovers``, ``failover_jobs_lost``, ``failover_duplicate_results`` and
    ``failover_stream_gaps`` (all must be 0 but ``failovers``), plus how many submits
    were acknowledged and refused. Raises ``TimeoutError`` if no replica is promoted.
    """
    report = FailoverReport()
    followers: list[StreamFollower] = []
    promoted: list[int] = []

    def fail_over() -> None:
        old_port = lab.sentinels.kill_master()
        promoted.append(lab.sentinels.wait_promoted(old_port))

    switch = threading.Thread(target=fail_over, daemon=True)
    for index in range(jobs):
        if index == jobs // 2:
            switch.start()  # submitting goes on while the sentinels fail over
        try:
            handle = client.submit(_story(index, max_tokens), tier=tier)
        except BrokerUnavailable:
            report.refused += 1
        else:
            followers.append(StreamFollower(client, handle.job_id, timeout_s=job_timeout_s))
        time.sleep(pace_s)
    switch.join(PROMOTION_TIMEOUT_S + 5.0)
    if not promoted:
        raise TimeoutError("the Redis master was killed but no replica was promoted")
    report.failovers = len(promoted)
    report.acknowledged = len(followers)
    for follower in followers:
        follower.join(job_timeout_s)
        _score(client, follower, report)
    return report


def _story(index: int, max_tokens: int) -> dict[str, Any]:
    return {
        "messages": [{"role": "user", "content": f"Tell a long story about owl number {index}."}],
        "max_tokens": max_tokens,
        "temperature": 0.0,
    }


def _score(client: Client, follower: StreamFollower, report: FailoverReport) -> None:
    report.job_ids.append(follower.job_id)
    report.failover_stream_gaps += follower.gaps()
    try:
        status = client.status(follower.job_id)
    except LlmqError:
        status = None
    final = follower.events[-1] if follower.finished else None
    if status is not JobStatus.DONE or not isinstance(final, FinalEvent):
        log.error("job %s lost across the failover: %s %s", follower.job_id, status, follower.error)
        report.failover_jobs_lost += 1
        return
    try:
        raw_events = client.redis.lrange(event_log_key(follower.job_id), 0, -1)
    except redis.RedisError as exc:
        raise BrokerUnavailable(f"cannot read the log of job {follower.job_id}") from exc
    report.failover_duplicate_results += max(0, terminal_events(raw_events) - 1)
