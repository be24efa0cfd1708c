"""Serving an embeddings call: the texts become a job of the embedding tier, owned by
the calling key, and the job's result becomes OpenAI's list of embeddings.

The job takes the path a chat job takes (keys, priorities, idempotency keys, the
queue ``llm.embed.<priority>``, a row); an interactive call with no embedding worker
is refused at once (503), as a chat call to an unserved tier is.
"""

from __future__ import annotations

from dataclasses import dataclass

from producer.aio import AsyncJobHandle
from producer.gateway.errors import MODEL_NOT_FOUND, GatewayError
from producer.gateway.protocol.embeddings import EMBED_MODELS, EmbeddingsRequest, embeddings_list
from producer.gateway.serving.common import CallOptions, JobServing, WholeAnswer
from schemas.embeddings import unpack_base64, unpack_vectors
from schemas.errors import LlmqError
from schemas.queues import Priority


@dataclass
class EmbeddingServing:
    """``POST /v1/embeddings`` once the route has read the call."""

    jobs: JobServing

    async def create(self, body: EmbeddingsRequest, call: CallOptions) -> WholeAnswer:
        """The call's answer, once its job ended.

        Raises ``GatewayError`` (404 for a model other than the embedding tier's names,
        429 over a key's limits), ``InvalidRequest`` naming a bad field, ``NoWarmWorker``
        for an interactive call no embedding worker serves, and the client's errors.
        """
        if body.model not in EMBED_MODELS:
            raise GatewayError(
                f"unknown embedding model {body.model!r}; use one of {', '.join(EMBED_MODELS)}",
                MODEL_NOT_FOUND,
            )
        handle = await self._submit(body, call)
        result = await self.jobs.whole(handle, body.model)
        try:
            vectors = (
                unpack_base64(result.text)
                if body.encoding_format == "base64"
                else unpack_vectors(result.text)
            )
        except ValueError as exc:
            raise LlmqError(f"job {result.job_id} ended without embeddings") from exc
        answer = embeddings_list(
            model=body.model,
            vectors=vectors,
            usage=result.usage,
            timings=result.timings,
            job_id=result.job_id,
            tier=result.tier.value,
        )
        return WholeAnswer(handle, answer)

    async def _submit(self, body: EmbeddingsRequest, call: CallOptions) -> AsyncJobHandle:
        gateway = self.jobs.gateway
        priority = body.priority or call.priority or Priority.INTERACTIVE.value
        identity = call.identity

        async def submit() -> AsyncJobHandle:
            return await gateway.client.submit_embeddings(
                body.to_llmq(),
                priority=priority,
                idempotency_key=call.idempotency_key,
                owner=identity.id if identity is not None else None,
                # A person is waiting: refuse now rather than queue behind no worker.
                require_warm_worker=priority == Priority.INTERACTIVE,
            )

        if identity is None:
            return await submit()
        async with gateway.fairness.submitting(identity.id):
            return await submit()
