"""The one retry policy: a fixed schedule of delays, then the error goes up.

Every loop that rides out a Redis or database outage uses it, so each states its
schedule (and with it its total budget) as data, and the waiting, logging and giving
up work the same everywhere.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")

log = logging.getLogger(__name__)


def retry_call(
    call: Callable[[], T],
    *,
    delays: Sequence[float],
    retry_on: type[BaseException] | tuple[type[BaseException], ...],
    what: str,
    sleep: Callable[[float], None] = time.sleep,
) -> T:
    """Return ``call()``; on ``retry_on``, wait the next of ``delays`` and call again.

    After the last delay, the error of the last call is raised. ``what`` names the
    action in the warning logged before each wait (never the error's text, which may
    carry hosts or parameters).
    """
    for delay in delays:
        try:
            return call()
        except retry_on as exc:
            log.warning("could not %s (%s); retrying in %.2f s", what, type(exc).__name__, delay)
            sleep(delay)
    return call()
