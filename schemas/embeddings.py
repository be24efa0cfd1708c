"""The embedding tier's contract: what an embedding job asks for (its stored request)
and how its vectors travel as the job's text (final event, job row, client result).

A job of the embedding tier (``schemas.queues.Tier.EMBED``) is a job like any other:
a row owned by its submitter, a message on ``llm.embed.<priority>``, a stream whose
final event ends it. Its answer is not prose: the final event's ``text`` (and the
row's ``output_text``) is :func:`pack_vectors`' JSON, one base64 string per input, in
input order, each the little-endian float32 vector exactly as OpenAI's
``encoding_format: "base64"`` sends it.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_validator

from schemas.text import database_text, valid_unicode

MAX_EMBED_INPUTS = 2048
"""Most texts one request may embed (OpenAI's own limit)."""
MAX_EMBED_INPUT_CHARS = 100_000
"""Longest text one input may be; the model reads only its first
``max_seq_length`` word pieces of it in any case."""


class EmbeddingRequest(BaseModel):
    """The texts of one embedding job, as stored on its row."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    input: list[str] = Field(min_length=1, max_length=MAX_EMBED_INPUTS)
    """The texts, embedded in this order; each non-empty, without NUL."""
    user: str | None = Field(default=None, max_length=256, exclude_if=lambda value: value is None)
    """The caller's own id for its end user (OpenAI's ``user``); stored, not used."""
    encoding_format: Literal["float", "base64"] = Field(
        default="float", exclude_if=lambda value: value == "float"
    )
    """How the answer sends each vector (a batch's output is built from the row, so
    the row keeps it); the job's text is the same either way."""

    @field_validator("user")
    @classmethod
    def _storable(cls, value: str | None) -> str | None:
        return database_text(value)

    @field_validator("input")
    @classmethod
    def _texts(cls, texts: list[str]) -> list[str]:
        for index, text in enumerate(texts):
            if not text:
                raise ValueError(f"input[{index}] is empty")
            if len(text) > MAX_EMBED_INPUT_CHARS:
                raise ValueError(
                    f"input[{index}] is {len(text)} characters; at most "
                    f"{MAX_EMBED_INPUT_CHARS} are embedded"
                )
            if "\x00" in text:
                raise ValueError(f"input[{index}] contains a NUL character")
            valid_unicode(text)
        return texts


def pack_vectors(vectors: Sequence[Sequence[float]] | np.ndarray) -> str:
    """The job text of ``vectors`` (one row per input): a JSON list of base64 strings
    of little-endian float32."""
    rows = np.asarray(vectors, dtype="<f4")
    if rows.ndim != 2:
        raise ValueError("vectors must be one row per input")
    return json.dumps([base64.b64encode(row.tobytes()).decode("ascii") for row in rows])


def unpack_base64(text: str) -> list[str]:
    """The base64 strings of a job text :func:`pack_vectors` wrote; raises
    ``ValueError`` for any other text."""
    try:
        rows = json.loads(text)
    except ValueError as exc:
        raise ValueError("the job's text holds no embeddings") from exc
    if not isinstance(rows, list) or not all(isinstance(row, str) for row in rows):
        raise ValueError("the job's text holds no embeddings")
    return rows


def unpack_vectors(text: str) -> list[list[float]]:
    """The vectors of a job text :func:`pack_vectors` wrote, as float lists; raises
    ``ValueError`` for any other text."""
    vectors = []
    for row in unpack_base64(text):
        try:
            raw = base64.b64decode(row, validate=True)
        except (binascii.Error, ValueError) as exc:
            raise ValueError("the job's text holds no embeddings") from exc
        if len(raw) % 4:
            raise ValueError("the job's text holds no embeddings")
        vectors.append(np.frombuffer(raw, dtype="<f4").astype(float).tolist())
    return vectors
