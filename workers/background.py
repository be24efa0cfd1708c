"""A worker's helper threads: each runs one loop until the worker stops it."""

from __future__ import annotations

import threading


class BackgroundLoop:
    """A daemon thread running :meth:`run` until :meth:`stop`; ``_stopping`` says when."""

    thread_name = "llmq-background"

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end and wait a little for it."""
        self._stopping.set()
        self._thread.join(timeout=5)

    def run(self) -> None:
        raise NotImplementedError
