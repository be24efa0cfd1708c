"""A private redis-server for fault benchmarks and tests: they crash it, never a shared one."""

from __future__ import annotations

import shutil
import socket
import subprocess
import time
from collections.abc import Callable
from pathlib import Path

import redis


def free_port() -> int:
    """A TCP port nothing listens on right now."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class RedisServer:
    """``redis-server`` on a free port, without persistence, that a test may restart."""

    def __init__(self, workdir: Path) -> None:
        self.port = free_port()
        self._workdir = workdir
        self._process: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        return f"redis://127.0.0.1:{self.port}/0"

    def start(self) -> None:
        binary = shutil.which("redis-server")
        assert binary is not None, "redis-server is not installed"
        command = [binary, "--port", str(self.port), "--bind", "127.0.0.1"]
        command += ["--save", "", "--appendonly", "no", "--dir", str(self._workdir)]
        self._process = subprocess.Popen(
            command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        self._wait_until_up()

    def pids(self) -> list[int]:
        """The server's process id, while it runs."""
        return [self._process.pid] if self._process is not None else []

    def stop(self) -> None:
        """Kill the server at once, as a crash would."""
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=10)
            self._process = None

    def restart(self, *, down_s: float = 0.0) -> None:
        """Crash the server, stay down ``down_s`` seconds, start it again (empty)."""
        self.stop()
        time.sleep(down_s)
        self.start()

    def _wait_until_up(self) -> None:
        client = redis.Redis(port=self.port)
        try:
            wait_for_ping(client, timeout_s=10)
        finally:
            client.close()


def wait_for_ping(
    client: redis.Redis, *, timeout_s: float, alive: Callable[[], None] = lambda: None
) -> None:
    """Return once ``client``'s server answers a PING; after ``timeout_s`` seconds,
    raise the ``ConnectionError`` of the last try. ``alive`` runs before each try and
    raises where waiting longer is pointless (the server's process died)."""
    deadline = time.monotonic() + timeout_s
    while True:
        alive()
        try:
            client.ping()
            return
        except redis.ConnectionError:
            if time.monotonic() > deadline:
                raise
            time.sleep(0.05)
