from __future__ import annotations

import json

from schemas.queues import Tier
from schemas.registry import WorkerEntry


def test_an_entry_survives_the_hash() -> None:
    entry = WorkerEntry(
        worker_id="small-1@h", tier=Tier.SMALL, concurrency=8, warm=True, in_flight=3
    )
    raw = {k.encode(): v.encode() for k, v in entry.encode().items()}
    assert WorkerEntry.decode(raw, worker_id="small-1@h") == entry
    assert entry.free_slots == 5


def test_fields_keep_the_encoding_workers_have_written() -> None:
    fields = WorkerEntry(worker_id="w", tier=Tier.LARGE, warm=True).encode()
    assert fields["warm"] == "1"
    assert fields["tier"] == '"large"'
    assert json.loads(fields["system_prompt_hits"]) == 0


def test_a_sparse_or_older_entry_decodes_with_defaults() -> None:
    entry = WorkerEntry.decode({"tier": '"medium"', "shiny_new": "1"}, worker_id="m-1@h")
    assert entry is not None
    assert entry.worker_id == "m-1@h"
    assert entry.tier is Tier.MEDIUM
    assert not entry.warm


def test_an_unreadable_entry_is_skipped() -> None:
    assert WorkerEntry.decode({}, worker_id="w") is None
    assert WorkerEntry.decode({"tier": "not json"}, worker_id="w") is None
    assert WorkerEntry.decode({"tier": '"huge"'}, worker_id="w") is None
