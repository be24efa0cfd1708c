"""What a tier's (or variant's) engine settings need from the device, checked at start-up.

A quantization or dtype the device cannot run must stop ``llmq worker`` at once with a
sentence naming the tier, the device and what it does support, instead of a vLLM
traceback minutes into loading. The lists follow vLLM's quantization hardware table
(docs: features/quantization, "Supported Hardware"): on an x86 CPU, AWQ, GPTQ and
INT8 W8A8 (compressed-tensors) run; FP8, Marlin, bitsandbytes, GGUF weights and the
ModelOpt formats need a GPU. Each needs a checkpoint already quantized that way.
"""

from __future__ import annotations

import os
import platform
from dataclasses import dataclass
from typing import Any

from pydantic import ValidationError
from sqlalchemy import Row, select
from sqlalchemy.exc import SQLAlchemyError
from sqlalchemy.orm import Session, sessionmaker

from schemas.boundary import database_error
from schemas.errors import ConfigError
from schemas.queues import Tier
from schemas.retry import retry_call
from schemas.settings import Settings, TierConfig
from schemas.tables import TierPromotion

CPU_QUANTIZATIONS = ("awq", "auto_awq", "gptq", "auto_gptq", "compressed-tensors")
CPU_DTYPES = ("auto", "float32", "bfloat16", "float16")
BF16_MIN_CAPABILITY = (8, 0)


@dataclass(frozen=True)
class Device:
    """The accelerator a worker's engine would run on, and what it can run."""

    name: str
    dtypes: tuple[str, ...]
    quantizations: tuple[str, ...]


def cpu_device() -> Device:
    """This host's CPU as vLLM's CPU backend sees it."""
    return Device(
        name=f"CPU ({platform.machine() or 'unknown'}, {os.cpu_count() or 1} cores; vLLM CPU)",
        dtypes=CPU_DTYPES,
        quantizations=CPU_QUANTIZATIONS,
    )


def detect_device() -> Device:
    """The device this process's engine would use (imports vLLM; call at start-up only)."""
    from workers.engine.vllm import running_on_cpu

    if running_on_cpu():
        return cpu_device()
    import torch
    from vllm.model_executor.layers.quantization import QUANTIZATION_METHODS

    index = torch.cuda.current_device()
    capability = tuple(torch.cuda.get_device_capability(index))
    dtypes = ["auto", "float32", "float16"]
    if capability >= BF16_MIN_CAPABILITY:
        dtypes.append("bfloat16")
    major, minor = capability[0], capability[1]
    return Device(
        name=f"GPU {torch.cuda.get_device_name(index)} (compute capability {major}.{minor})",
        dtypes=tuple(dtypes),
        quantizations=tuple(QUANTIZATION_METHODS),
    )


def check_engine_config(tier: Tier, config: TierConfig, device: Device) -> None:
    """Raise ``ConfigError`` when ``device`` cannot run ``tier``'s dtype or quantization."""
    kind = "variant" if tier.is_variant else "tier"
    if config.quantization is not None and config.quantization not in device.quantizations:
        raise ConfigError(
            f"{kind} {tier}: quantization {config.quantization!r} does not run on {device.name}; "
            f"it runs: {', '.join(device.quantizations)} (or none)"
        )
    if config.dtype not in device.dtypes:
        raise ConfigError(
            f"{kind} {tier}: dtype {config.dtype!r} does not run on {device.name}; "
            f"it runs: {', '.join(device.dtypes)}"
        )


@dataclass(frozen=True)
class Served:
    """What a worker of a tier serves: its own configuration or a promoted variant's."""

    name: Tier
    config: TierConfig
    promoted: bool


# Not a setting: a worker that cannot read promotions fails its start, and its
# supervisor starts it again.
# About four seconds in all, before a worker gives up its start.
PROMOTIONS_RETRY_DELAYS_S = (0.2, 0.5, 1.0, 2.0)


def served_config(settings: Settings, tier: Tier, sessions: sessionmaker[Session]) -> Served:
    """``tier``'s engine settings, or those of the variant last promoted to serve it.

    A variant serves its own settings. A base tier serves the configuration stored with
    its newest promotion (``llmq ab promote``), when there is one that names a variant.
    Raises ``ConfigError`` for a tier not configured, ``DatabaseUnavailable`` if the
    promotions cannot be read.
    """
    own = settings.tier(tier)
    if tier.is_variant:
        return Served(tier, own, promoted=False)
    query = (
        select(TierPromotion.variant, TierPromotion.config)
        .where(TierPromotion.tier == tier.value)
        .order_by(TierPromotion.created_at.desc(), TierPromotion.id.desc())
        .limit(1)
    )

    def newest_promotion() -> Row[tuple[str, dict[str, Any] | None]] | None:
        with sessions() as session:
            return session.execute(query).first()

    try:
        # A worker that cannot read this does not start: a database blip at that moment
        # must not stop it (seen once with SQLite, as several workers started at once).
        row = retry_call(
            newest_promotion,
            delays=PROMOTIONS_RETRY_DELAYS_S,
            retry_on=SQLAlchemyError,
            what="read tier promotions",
        )
    except SQLAlchemyError as exc:
        raise database_error(exc, doing="read tier promotions") from exc
    if row is None or row.config is None or row.variant == tier.value:
        return Served(tier, own, promoted=False)
    try:
        config = TierConfig.model_validate(row.config)
    except ValidationError as exc:
        raise ConfigError(f"the promotion of {row.variant} to {tier} is unreadable: {exc}") from exc
    return Served(Tier(row.variant), config, promoted=True)
