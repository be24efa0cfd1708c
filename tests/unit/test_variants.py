"""Variants of a tier: names, queues, configuration beside the base tiers, device checks."""

from __future__ import annotations

import json
import pickle

import pytest
from pydantic import BaseModel, ValidationError

from schemas.errors import ConfigError
from schemas.queues import (
    Priority,
    Tier,
    all_queues,
    is_tier_name,
    parse_queue_name,
    queue_name,
    tier_queues,
)
from schemas.requests import EnqueueOptions
from schemas.settings import Settings, TierConfig
from workers.envelope import is_job_queue
from workers.variants import CPU_QUANTIZATIONS, Device, check_engine_config, cpu_device
from workers.worker import make_worker_id, worker_pid


@pytest.mark.parametrize("name", ["small", "large", "small@bf16", "medium@awq-int4", "large@q_8"])
def test_good_tier_names(name: str) -> None:
    assert is_tier_name(name)
    tier = Tier(name)
    assert tier == name and str(tier) == name and f"{tier}" == name
    assert tier.base == name.partition("@")[0]
    assert tier.is_variant == ("@" in name)


@pytest.mark.parametrize(
    "name",
    [
        "",
        "auto",
        "tiny",
        "small@",
        "@bf16",
        "small@BF16",
        "small@a.b",
        "small@a@b",
        "small@-x",
        "small@" + "x" * 11,
        "Small",
    ],
)
def test_bad_tier_names(name: str) -> None:
    assert not is_tier_name(name)
    with pytest.raises(ValueError, match="not a valid Tier"):
        Tier(name)


def test_the_class_iterates_base_tiers_only() -> None:
    assert [t.value for t in Tier] == ["small", "medium", "large"]
    assert len(Tier) == 3
    assert Tier("small") is Tier.SMALL
    assert Tier("small@bf16").base is Tier.SMALL
    assert pickle.loads(pickle.dumps(Tier("small@bf16"))) == "small@bf16"


def test_variant_queues() -> None:
    variant = Tier("small@bf16")
    assert queue_name(variant, Priority.INTERACTIVE) == "llm.small@bf16.interactive"
    assert parse_queue_name("llm.small@bf16.batch") == (variant, Priority.BATCH)
    assert tier_queues(variant) == ["llm.small@bf16.interactive", "llm.small@bf16.batch"]
    assert is_job_queue("llm.small@bf16.interactive")
    assert not is_job_queue("llm.small@BF16.interactive")
    assert all_queues() == [q for t in Tier for q in tier_queues(t)]
    assert all_queues([variant])[-2:] == tier_queues(variant)


def test_pydantic_fields_take_variants() -> None:
    class Model(BaseModel):
        tier: Tier

    assert Model(tier="small@bf16").model_dump(mode="json") == {"tier": "small@bf16"}
    assert isinstance(Model(tier="small").tier, Tier)
    with pytest.raises(ValidationError):
        Model(tier="small@")
    assert EnqueueOptions(tier="medium@fp8").tier == "medium@fp8"


def test_a_variant_starts_from_its_base_tier(monkeypatch: pytest.MonkeyPatch) -> None:
    table = {"small": {"concurrency": 8}, "small@bf16": {"dtype": "bfloat16"}}
    monkeypatch.setenv("LLMQ_TIERS", json.dumps(table))
    monkeypatch.delenv("LLMQ_TIERS_FILE", raising=False)
    settings = Settings.from_env()
    assert settings.variants == ["small@bf16"]
    variant = settings.tier(Tier("small@bf16"))
    assert variant.dtype == "bfloat16" and variant.concurrency == 8
    assert settings.tier(Tier.SMALL).dtype == "auto"
    with pytest.raises(ConfigError, match=r"no tier small@x is configured .*small@bf16"):
        settings.tier(Tier("small@x"))


def test_worker_ids_of_variants() -> None:
    worker_id = make_worker_id(Tier("small@awq-int4"))
    assert worker_id.startswith("small@awq-int4-")
    assert worker_pid(worker_id) > 0
    assert worker_pid(make_worker_id(Tier.SMALL)) == worker_pid(worker_id)


def test_an_unsupported_quantization_fails_naming_variant_device_and_support() -> None:
    config = TierConfig(quantization="fp8")
    with pytest.raises(ConfigError) as caught:
        check_engine_config(Tier("small@fp8"), config, cpu_device())
    message = str(caught.value)
    assert message.startswith("variant small@fp8: quantization 'fp8' does not run on CPU")
    assert all(name in message for name in CPU_QUANTIZATIONS)


def test_an_unsupported_dtype_fails() -> None:
    old_gpu = Device(
        name="GPU Tesla T4 (compute capability 7.5)",
        dtypes=("auto", "float32", "float16"),
        quantizations=("awq",),
    )
    with pytest.raises(ConfigError, match=r"variant large@bf16: dtype 'bfloat16' .*Tesla T4"):
        check_engine_config(Tier("large@bf16"), TierConfig(dtype="bfloat16"), old_gpu)


def test_what_the_cpu_runs_passes() -> None:
    for config in (TierConfig(), TierConfig(dtype="bfloat16"), TierConfig(quantization="awq")):
        check_engine_config(Tier("small@x"), config, cpu_device())


def test_a_worker_of_an_unsupported_variant_stops_at_once_with_the_message() -> None:
    import os
    import subprocess
    import sys

    env = {
        **os.environ,
        "LLMQ_TIERS": json.dumps({"small@fp8": {"quantization": "fp8"}}),
        "LLMQ_BROKER_URL": "redis://127.0.0.1:1/0",  # never reached: the check comes first
        "CUDA_VISIBLE_DEVICES": "",  # this device is a CPU, whatever the host has
    }
    env.pop("LLMQ_TIERS_FILE", None)
    done = subprocess.run(
        [sys.executable, "-m", "producer.cli", "worker", "--tier", "small@fp8"],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 1
    assert done.stderr.strip().startswith("llmq: error: variant small@fp8: quantization 'fp8'")
    assert "Traceback" not in done.stderr and "awq" in done.stderr
