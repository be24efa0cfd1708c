"""A compressed prompt version, registered while the worker runs, gated against the
original through the real worker: the worker picks the version up, answers both, and
the bare name keeps resolving to the original."""

from __future__ import annotations

import pytest

from producer.client import Client
from producer.limits import count_text_tokens, tokenizer_file
from producer.prompts.compress import compress
from producer.prompts.embed import load_embedder
from producer.prompts.gate import run_prompt_gate, wait_for_prompts
from producer.prompts.store import register_version
from producer.quality.cases import load_cases
from schemas.prompt_registry import PromptRegistry
from schemas.queues import Tier
from schemas.settings import Settings

pytestmark = pytest.mark.e2e


def test_the_gate_runs_both_prompt_versions_through_the_worker(
    e2e_settings: Settings, client: Client
) -> None:
    folder = e2e_settings.prompts_dir
    assert folder is not None
    registry = PromptRegistry.load(folder)
    original = registry.resolve("support-verbose@1")
    path = tokenizer_file(e2e_settings, Tier.SMALL)
    result = compress(
        original.text,
        count=lambda text: count_text_tokens(text, path),
        embed=load_embedder(),
        target_tokens=1400,
    )
    new = register_version(folder, registry, original, result.text)
    wait_for_prompts(client, Tier.SMALL, [original.ref, new.ref], timeout_s=300)
    cases = [c for c in load_cases() if "customer-service" in c.tags][:4]
    gate = run_prompt_gate(
        client,
        a_ref=original.ref,
        b_ref=new.ref,
        cases=cases,
        tier=Tier.SMALL,
        threshold_points=3.0,
        max_tokens=16,
    )
    assert gate.result.n == 4
    # Four cases cannot decide anything: the gate says so rather than guess.
    assert gate.result.verdict == "inconclusive"
    assert len(gate.a_ttft_ms) == len(gate.b_ttft_ms) == 4
    assert PromptRegistry.load(folder).resolve("support-verbose").ref == original.ref
