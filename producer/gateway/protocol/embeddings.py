"""OpenAI's embeddings (``POST /v1/embeddings``): the request the gateway accepts and
the ``list`` of ``embedding`` objects it returns.

Every field OpenAI defines is served or refused by name: text inputs (one string or a
list) are served; token-id inputs and ``dimensions`` (the model's vectors have one
fixed length) are 400s naming the field, as is a field nobody defines.

Shapes only: nothing here opens a job or knows HTTP.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, field_validator
from pydantic_core import PydanticCustomError

from schemas.events import Timings, Usage

EMBED_MODELS = ("embed", "auto")
"""Model names ``/v1/embeddings`` takes: the embedding tier (``auto`` picks it too)."""


class EmbeddingsRequest(BaseModel):
    """``POST /v1/embeddings``."""

    model_config = ConfigDict(extra="forbid")

    model: str
    input: Any
    encoding_format: Literal["float", "base64"] = "float"
    dimensions: int | None = None
    user: str | None = None
    # llmq extension, sent by SDKs through extra_body (else the X-Priority header).
    priority: Literal["interactive", "batch"] | None = None

    @field_validator("input")
    @classmethod
    def _texts(cls, value: Any) -> list[str]:
        if isinstance(value, str):
            return [value]
        if not isinstance(value, list) or not value:
            raise PydanticCustomError(
                "embedding_input", "input must be a string or a non-empty list of strings"
            )
        if all(isinstance(item, str) for item in value):
            return value
        if all(isinstance(item, int) or _token_list(item) for item in value):
            raise PydanticCustomError(
                "embedding_input",
                "token-id input is not served; send the text (a string or a list of strings)",
            )
        raise PydanticCustomError(
            "embedding_input", "input must be a string or a non-empty list of strings"
        )

    @field_validator("dimensions")
    @classmethod
    def _no_dimensions(cls, value: int | None) -> None:
        if value is not None:
            raise PydanticCustomError(
                "unserved_field",
                "dimensions is not served: the embedding model's vectors have one fixed "
                "length; leave it out",
            )

    @property
    def texts(self) -> list[str]:
        """The inputs, one text each (the validator made ``input`` a list)."""
        texts: list[str] = self.input
        return texts

    def to_llmq(self) -> dict[str, Any]:
        """The job's stored request (validated later by ``EmbeddingRequest``)."""
        request: dict[str, Any] = {"input": self.texts}
        if self.user is not None:
            request["user"] = self.user
        if self.encoding_format != "float":
            request["encoding_format"] = self.encoding_format
        return request


def _token_list(item: object) -> bool:
    return isinstance(item, list) and all(isinstance(token, int) for token in item)


def embeddings_list(
    *,
    model: str,
    vectors: Sequence[list[float]] | Sequence[str],
    usage: Usage,
    timings: Timings,
    job_id: str,
    tier: str,
) -> dict[str, Any]:
    """OpenAI's answer: one ``embedding`` object per input, in input order (floats, or
    base64 strings of little-endian float32), and the tokens the model read.

    ``id`` and ``llmq`` (job id, tier, timings) are llmq's additions, as on chat answers.
    """
    data = [
        {"object": "embedding", "index": index, "embedding": vector}
        for index, vector in enumerate(vectors)
    ]
    return {
        "object": "list",
        "id": job_id,
        "data": data,
        "model": model,
        "usage": {"prompt_tokens": usage.prompt_tokens, "total_tokens": usage.prompt_tokens},
        "llmq": {"job_id": job_id, "tier": tier, "timings": timings.model_dump()},
    }
