"""The Batch API's routes, OpenAI's shapes: ``/v1/files`` and ``/v1/batches``.

Thin: each route checks who calls, then calls :mod:`producer.batches` in a thread of
the Batch API's own bounded pool (``batch_api_threads``), never the pool key checks and
submits use: a flood of uploads, downloads or cancels waits its turn there. Every id
is the calling key's own: another key's file or batch is a 404.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from contextlib import AbstractAsyncContextManager, asynccontextmanager
from functools import partial
from typing import Any, TypeVar

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, StreamingResponse
from pydantic import BaseModel, ConfigDict, Field
from starlette.datastructures import UploadFile
from starlette.exceptions import HTTPException

from producer.batches import store
from producer.batches.content import CONTENT_PIECE_BYTES, file_content
from producer.batches.lines import CHAT_ENDPOINT
from producer.batches.runner import BatchRunner
from producer.batches.views import batch_object, file_object
from producer.gateway.context import GatewayContext
from producer.gateway.errors import BAD_REQUEST, GatewayError
from producer.gateway.pacing import BytePacer, paced_receive
from schemas.tables import BatchFile

FILES_PATH = "/v1/files"
# Not a setting: how far ahead of their average rate downloads may send bounds no
# outcome; it only has to hold a few pieces of content.
DOWNLOAD_BURST_BYTES = 1024 * 1024
"""How far ahead of ``settings.download_bytes_per_s`` downloads may send."""
# Not a setting either: a small file (a few thousand lines) is stored at once.
UPLOAD_BURST_BYTES = 1024 * 1024
"""How far ahead of ``settings.upload_bytes_per_s`` uploads may be stored."""
Lifespan = Callable[[FastAPI], AbstractAsyncContextManager[Any]]
T = TypeVar("T")


class CreateBatch(BaseModel):
    """``POST /v1/batches``; ``tier`` is llmq's (``extra_body``): one tier for every line."""

    model_config = ConfigDict(extra="ignore")

    input_file_id: str = Field(min_length=1, max_length=100)
    endpoint: str = CHAT_ENDPOINT
    completion_window: str = "24h"
    metadata: dict[str, str] | None = Field(default=None, max_length=16)
    tier: str = "auto"


class BatchApi:
    """The routes, sharing the gateway's client, and the runner that feeds batches."""

    def __init__(self, gateway: GatewayContext, *, downloads: BytePacer | None = None) -> None:
        """``downloads``: the byte budget every file download shares (by default
        ``settings.download_bytes_per_s``, ``DOWNLOAD_BURST_BYTES`` ahead)."""
        self.gateway = gateway
        self.runner: BatchRunner | None = None
        rate = gateway.settings.download_bytes_per_s
        self._downloads = downloads or BytePacer(rate, burst=DOWNLOAD_BURST_BYTES)
        self._uploads = BytePacer(gateway.settings.upload_bytes_per_s, burst=UPLOAD_BURST_BYTES)
        self._upload_bodies = BytePacer(
            gateway.settings.upload_bytes_per_s, burst=UPLOAD_BURST_BYTES
        )
        self._pool = ThreadPoolExecutor(
            gateway.settings.batch_api_threads, thread_name_prefix="llmq-batch-api"
        )

    async def _run(self, work: Callable[[], T]) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, work)

    async def _owner(self, request: Request) -> str | None:
        identity = await self.gateway.identify(request)
        return None if identity is None else identity.id

    @property
    def _sessions(self) -> Any:
        return self.gateway.client.sessions

    def _cancel_jobs(self, batch_id: str, *, scope: str = "", keys: Sequence[str] = ()) -> int:
        return self.gateway.client.sync.cancel_batch_jobs(batch_id, scope=scope, keys=keys)

    @property
    def _quotas(self) -> store.Quotas:
        return store.Quotas.from_settings(self.gateway.settings)

    async def upload(self, request: Request) -> JSONResponse:
        owner = await self._owner(request)
        # The body is read at the uploads' budget too: parsed as it comes, on the loop.
        request = Request(request.scope, paced_receive(request.receive, self._upload_bodies))
        try:
            form = await request.form(max_files=1, max_fields=8)
        except HTTPException as exc:
            raise GatewayError(f"invalid multipart upload: {exc.detail}", BAD_REQUEST) from None
        try:
            upload = form.get("file")
            purpose = form.get("purpose")
            if not isinstance(upload, UploadFile) or not isinstance(purpose, str):
                raise GatewayError(
                    "send a multipart form with a 'file' and a 'purpose' field", BAD_REQUEST
                )
            upload.file.seek(0)
            create = partial(
                store.create_file,
                filename=upload.filename or "upload.jsonl",
                purpose=purpose,
                owner=owner,
                max_line_bytes=self.gateway.settings.max_body_bytes,
                max_lines=self.gateway.settings.batch_max_lines,
                quotas=self._quotas,
                pace=self._uploads.take_blocking,
            )
            row = await self._run(partial(create, self._sessions, upload.file))
        finally:
            await form.close()
        return JSONResponse(file_object(row))

    async def file(self, file_id: str, request: Request) -> JSONResponse:
        owner = await self._owner(request)
        row = await self._run(partial(store.get_file, self._sessions, file_id, owner=owner))
        return JSONResponse(file_object(row))

    async def delete_file(self, file_id: str, request: Request) -> JSONResponse:
        """``DELETE /v1/files/{id}``: the file and its lines are gone (409 while a batch
        not yet ended reads it)."""
        owner = await self._owner(request)
        deleted = await self._run(partial(store.delete_file, self._sessions, file_id, owner=owner))
        return JSONResponse({"id": deleted, "object": "file", "deleted": True})

    async def content(self, file_id: str, request: Request) -> StreamingResponse:
        owner = await self._owner(request)
        row = await self._run(partial(store.get_file, self._sessions, file_id, owner=owner))
        return StreamingResponse(self._pieces(row), media_type="application/jsonl")

    async def _pieces(self, row: BatchFile) -> AsyncIterator[bytes]:
        """The file's content; each page is read in the pool, none is held while sent.

        A piece's bytes come from the budget all downloads share before its pages are
        read (a piece's usual size first, the rest of a longer one after): a download
        waiting for the budget reads nothing, so a crowd of readers arriving together
        reads at the budget's pace rather than a page each at once.
        """
        pieces = file_content(self._sessions, row)
        while True:
            await self._downloads.take(CONTENT_PIECE_BYTES)
            piece = await self._run(partial(next, pieces, None))
            if piece is None:
                return
            if len(piece) > CONTENT_PIECE_BYTES:
                await self._downloads.take(len(piece) - CONTENT_PIECE_BYTES)
            yield piece

    async def create(self, body: CreateBatch, request: Request) -> JSONResponse:
        owner = await self._owner(request)
        create = partial(
            store.create_batch,
            input_file_id=body.input_file_id,
            endpoint=body.endpoint,
            completion_window=body.completion_window,
            owner=owner,
            tier=body.tier,
            metadata=body.metadata,
            quotas=self._quotas,
        )
        row = await self._run(partial(create, self._sessions))
        if self.runner is not None:
            self.runner.wake()
        return JSONResponse(batch_object(row))

    async def retrieve(self, batch_id: str, request: Request) -> JSONResponse:
        owner = await self._owner(request)
        row = await self._run(partial(store.get_batch, self._sessions, batch_id, owner=owner))
        refresh = partial(
            store.refresh_batch, self._sessions, row.id, cancel_batch_jobs=self._cancel_jobs
        )
        row = await self._run(refresh)
        return JSONResponse(batch_object(row))

    async def listing(
        self, request: Request, limit: int = 20, after: str | None = None
    ) -> JSONResponse:
        owner = await self._owner(request)
        find = partial(store.list_batches, owner=owner, limit=limit, after=after)
        rows, has_more = await self._run(partial(find, self._sessions))
        data = [batch_object(row) for row in rows]
        return JSONResponse(
            {
                "object": "list",
                "data": data,
                "first_id": data[0]["id"] if data else None,
                "last_id": data[-1]["id"] if data else None,
                "has_more": has_more,
            }
        )

    async def cancel(self, batch_id: str, request: Request) -> JSONResponse:
        owner = await self._owner(request)
        # One UPDATE cancels the queued jobs and one pipeline tells the running ones'
        # workers, however many lines the batch has.
        cancel = partial(store.cancel_batch, owner=owner, cancel_batch_jobs=self._cancel_jobs)
        row = await self._run(partial(cancel, self._sessions, batch_id))
        if self.runner is not None:
            self.runner.wake()
        return JSONResponse(batch_object(row))

    def lifespan(self, inner: Lifespan) -> Lifespan:
        """The app's lifespan, with the batch runner started after the gateway's client."""

        @asynccontextmanager
        async def with_runner(app: FastAPI) -> AsyncIterator[Any]:
            async with inner(app) as state:
                self.runner = BatchRunner(
                    self.gateway.client.sync, feeders=self.gateway.settings.batch_feeders
                )
                self.runner.start()
                try:
                    yield state
                finally:
                    await self.runner.stop()
                    self._pool.shutdown(wait=False, cancel_futures=True)

        return with_runner


def add_batch_api(app: FastAPI, gateway: GatewayContext) -> None:
    """Add the files and batches routes, and run the batch runner with the app."""
    api = BatchApi(gateway)
    app.add_api_route(FILES_PATH, api.upload, methods=["POST"])
    app.add_api_route(FILES_PATH + "/{file_id}", api.file, methods=["GET"])
    app.add_api_route(FILES_PATH + "/{file_id}", api.delete_file, methods=["DELETE"])
    app.add_api_route(
        FILES_PATH + "/{file_id}/content", api.content, methods=["GET"], response_model=None
    )
    app.add_api_route("/v1/batches", api.create, methods=["POST"])
    app.add_api_route("/v1/batches", api.listing, methods=["GET"])
    app.add_api_route("/v1/batches/{batch_id}", api.retrieve, methods=["GET"])
    app.add_api_route("/v1/batches/{batch_id}/cancel", api.cancel, methods=["POST"])
    app.router.lifespan_context = api.lifespan(app.router.lifespan_context)
