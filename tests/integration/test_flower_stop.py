"""``llmq flower`` stops when asked, even while it waits on the workers."""

from __future__ import annotations

import contextlib
import os
import subprocess
import threading
import time

import httpx

from producer.gateway.cli import flower_launch
from schemas.settings import Settings
from tests.gateway_server import free_port

# No worker answers here, so each of Flower's inspect calls lasts this whole timeout.
INSPECT_TIMEOUT_MS = 120_000


def test_flower_ends_at_once_on_sigterm_while_asking_the_workers(
    integration_settings: Settings,
) -> None:
    port = free_port()
    command, env = flower_launch(
        integration_settings.broker_url,
        port=port,
        address="127.0.0.1",
        basic_auth=None,
        env=os.environ,
    )
    env["FLOWER_INSPECT_TIMEOUT"] = str(INSPECT_TIMEOUT_MS)
    flower = subprocess.Popen(
        command, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
    )
    try:
        _wait_until_serving(port)
        refresh = threading.Thread(target=_ask_for_workers, args=(port,), daemon=True)
        refresh.start()
        time.sleep(1.0)  # the refresh's inspect calls are under way
        assert refresh.is_alive()
        flower.terminate()
        # Before, its exit waited out the inspect calls (two minutes here).
        assert flower.wait(timeout=30) == 0
        refresh.join(timeout=30)
    finally:
        if flower.poll() is None:
            flower.kill()
            flower.wait()


def _wait_until_serving(port: int) -> None:
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(f"http://127.0.0.1:{port}/healthcheck", timeout=5).text == "OK":
                return
        time.sleep(0.5)
    raise AssertionError("Flower did not start serving within 90 s")


def _ask_for_workers(port: int) -> None:
    with contextlib.suppress(httpx.HTTPError):  # Flower goes away while it answers
        httpx.get(
            f"http://127.0.0.1:{port}/api/workers",
            params={"refresh": "1"},
            timeout=INSPECT_TIMEOUT_MS / 1000 + 30,
        )
