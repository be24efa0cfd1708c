"""The fault lab's counters that must be zero: each is a goal of the bench report, and
a bar of its plot."""

FAULT_ZERO_KEYS = (
    "jobs_lost",
    "duplicate_results",
    "stream_gaps",
    "stream_dups",
    "stalled_jobs",
    "crashes",
    "fuzz_request_crashes",
    "fuzz_worker_crashes",
)
