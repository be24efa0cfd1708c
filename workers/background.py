"""A worker's helper threads: each runs one loop until the worker stops it."""

from __future__ import annotations

import threading

# Not a setting: a helper thread's loop ends within one of its own waits; this only
# keeps a stuck one from holding up shutdown.
JOIN_TIMEOUT_S = 5.0


class BackgroundLoop:
    """A daemon thread running :meth:`run` until :meth:`stop`; ``_stopping`` says when.

    Every helper thread of a worker (heartbeat, keep-warm, cancel listener, reaper) is
    one of these, so each is started and joined the same way; as a context manager it
    runs for the ``with`` block (``run_worker`` enters them on its ``ExitStack``). A
    subclass calls ``__init__`` from its own (a dataclass, from ``__post_init__``).
    """

    thread_name = "llmq-background"

    def __init__(self) -> None:
        self._stopping = threading.Event()
        self._thread = threading.Thread(target=self.run, name=self.thread_name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        """Ask the loop to end and wait a little for it; harmless if never started."""
        self._stopping.set()
        if self._thread.ident is not None:
            self._thread.join(timeout=JOIN_TIMEOUT_S)

    def run(self) -> None:
        raise NotImplementedError

    def __enter__(self) -> BackgroundLoop:
        self.start()
        return self

    def __exit__(self, *_exc: object) -> None:
        self.stop()
