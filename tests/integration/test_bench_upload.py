"""``llmq bench upload`` on a small file: every line stored and enqueued, figures present."""

from __future__ import annotations

import pytest

from bench.upload import run_upload
from schemas.settings import Settings

pytestmark = pytest.mark.integration


def test_every_line_is_stored_and_enqueued_on_a_private_redis() -> None:
    result = run_upload(Settings(), lines=50)
    assert result["enqueued"] == 50
    assert result["file_mb"] > 0
    assert result["store_s"] >= 0 and result["enqueue_lines_s"] > 0
    assert result["peak_rss_mb_after_enqueue"] >= result["peak_rss_mb_before"] > 0
