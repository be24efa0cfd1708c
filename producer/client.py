"""The synchronous client: submit a request, stream its tokens, wait for its result."""

from __future__ import annotations

import logging
import time
from collections.abc import Callable, Generator, Iterator, Sequence
from functools import partial
from typing import TypedDict

import redis
from sqlalchemy import Engine
from sqlalchemy.orm import Session, sessionmaker

from producer.admission import WorkerDirectory
from producer.conversations import with_conversation
from producer.embeddings import EmbedInput, prepare_embeddings, record_and_enqueue
from producer.enqueue import Enqueuer
from producer.handles import HandleCore, with_logprobs
from producer.jobs import (
    cancel_batch_rows,
    cancel_if_queued,
    check_database,
    delete_job,
    fresh_job_id,
    insert_job,
    load_job,
    new_job_id,
    probe_database,
    routed_tier_of,
    terminal_event_from_row,
)
from producer.limits import count_text_tokens, preload_tokenizers, tokenizer_file
from producer.pubsub_pool import SyncPubSub, SyncPubSubPool
from producer.router.route import Router
from producer.status import QueueDepth, queue_depths
from producer.streams import (
    Event,
    TerminalLookup,
    close_stream,
    close_streams,
    read_events,
    request_cancel,
    request_cancels,
)
from producer.submission import RequestLike, Submission, prepare_submission
from schemas.boundary import broker_boundary
from schemas.broker import redis_client as broker_client
from schemas.db import make_engine, make_sessions
from schemas.errors import LlmqError
from schemas.events import TerminalEvent, TokenLogprob
from schemas.jobs import CANCELLED_MESSAGE, JobResult, JobStatus
from schemas.messages import ROW_WAIT_S, JobMessage, celery_job_message
from schemas.prompt_registry import PromptCatalog, PromptRegistry
from schemas.queues import Priority, Tier, event_channel
from schemas.settings import Settings
from schemas.tables import Job

log = logging.getLogger(__name__)

CANCEL_PIPELINE = 1000
"""Streams closed per pipeline when a batch's queued jobs are cancelled at once."""


class StreamRecovery(TypedDict):
    """The arguments of ``read_events`` that a client fills in."""

    terminal_lookup: TerminalLookup
    reconnect_budget_s: float


class EmbedOptions(TypedDict, total=False):
    """The enqueue options of :meth:`Client.submit_embeddings`, by name, for a caller
    that passes them on (the asyncio client); each means what it means there."""

    priority: Priority | str
    idempotency_key: str | None
    owner: str | None
    require_warm_worker: bool
    deadline_s: float | None


class SubmitOptions(EmbedOptions, total=False):
    """The enqueue options of :meth:`Client.submit`: those of an embedding job, a tier
    and a conversation."""

    tier: Tier | str
    conversation_id: str | None


def _nothing() -> None: ...


class Client:
    """Submits jobs to llmq. Thread-safe; create one per process and reuse it."""

    def __init__(
        self,
        settings: Settings,
        *,
        redis_client: redis.Redis | None = None,
        db_engine: Engine | None = None,
        warm: bool = True,
    ) -> None:
        """Connect to Redis and the database; with ``warm`` (the default), do it now.

        Warming loads the tiers' tokenizers and opens every connection up front, so the
        first ``submit`` costs what every later one does.
        """
        self.settings = settings
        self._redis = redis_client or broker_client(settings.broker_url)
        self._subscriptions = SyncPubSubPool(self._redis)
        self._db = db_engine or make_engine(settings.database_url)
        self._sessions: sessionmaker[Session] = make_sessions(self._db)
        self._enqueuer = Enqueuer(settings, self._redis)
        self._prompts = PromptCatalog(settings.prompts_dir)
        self._workers = WorkerDirectory(
            self._redis, restart_grace_s=settings.worker_restart_grace_s
        )
        self.router = Router(settings, self._redis, workers=self._workers)
        if warm:
            self.warm()

    @classmethod
    def from_env(cls) -> Client:
        """A client configured from ``LLMQ_*`` environment variables."""
        return cls(Settings.from_env())

    def submit(
        self,
        request: RequestLike,
        *,
        tier: Tier | str = "auto",
        priority: Priority | str = Priority.INTERACTIVE,
        idempotency_key: str | None = None,
        owner: str | None = None,
        require_warm_worker: bool = False,
        deadline_s: float | None = None,
        conversation_id: str | None = None,
        job_id: str | None = None,
        subscribe: bool = False,
        before_row: Callable[[], None] | None = None,
        before_send: Callable[[], None] | None = None,
    ) -> JobHandle:
        """Validate, route, record and enqueue ``request``; return at once with a handle.

        ``request`` is text, a dict or a ``GenerationRequest``. Nothing is left
        half-enqueued: the job row is committed (status queued) before the message is
        published, and removed if publishing fails (Redis refuses, or the queue is at
        its depth limit). A new interactive job whose message carries its request goes
        the other way round, so its row's write is off the way to the first token: the
        message first, then, ``row_write_delay_ms`` later, the row (the worker waits
        for it); if the row cannot be written the message is taken back or, taken
        already, dropped by the worker.
        ``owner`` records who submitted it
        (the gateway's API key id, or any namespace of up to 32 characters) and scopes
        ``idempotency_key``: the same owner, key and request return the same job; the
        same owner and key with a different request raise ``IdempotencyConflict``; another
        owner's key is not seen at all (no owner is one namespace of its own). With
        ``require_warm_worker`` the job is refused (``NoWarmWorker``) when no worker
        serves its tier: none is warm, none is starting, and none was warm in the last
        ``worker_restart_grace_s`` (a restarting tier's work is queued). With
        ``deadline_s``, a job not finished that long after submit is stopped (status
        failed, the reason on its row and stream). With
        ``conversation_id`` the finished job's new turns (its user messages and the
        answer) are kept in that conversation of ``owner``, for the nightly summaries.
        ``job_id`` (made by ``producer.jobs.new_job_id``) is the id a new job gets, so a
        caller can subscribe to its stream first; an idempotent replay returns the
        existing job, whose id differs. With ``subscribe`` the job's stream is subscribed
        to (and Redis has confirmed it) before the job is written, so a reader that
        starts right after has nothing to ask Redis before the first token, while the
        worker hands the job to its engine (``handle.events`` uses it; read them or
        ``handle.close()``); the SUBSCRIBE goes out first and its confirmation is read
        just before the row is written, so its round trip overlaps the message's.
        ``before_row`` is called right before the row is written (for a caller that
        subscribes by other means, as the asyncio client does), ``before_send`` once the
        request is routed, before anything is written or sent (its error is the
        submit's). Raises ``InvalidRequest``, ``PromptTooLong``, ``IdempotencyConflict``,
        ``QueueFull``, ``NoWarmWorker``, ``BrokerUnavailable`` or ``DatabaseUnavailable``.
        """
        submit = partial(
            self._submit,
            request,
            tier=tier,
            priority=priority,
            idempotency_key=idempotency_key,
            owner=owner,
            require_warm_worker=require_warm_worker,
            deadline_s=deadline_s,
            conversation_id=conversation_id,
            before_send=before_send or _nothing,
        )
        if not subscribe:
            return submit(job_id=job_id, before_row=before_row)
        return self._submit_subscribed(submit, job_id or new_job_id(), before_row)

    def _submit_subscribed(
        self,
        submit: Callable[..., JobHandle],
        job_id: str,
        before_row: Callable[[], None] | None,
    ) -> JobHandle:
        """``submit`` with the job's stream subscribed to: sent first, confirmed before
        the row is written; the handle keeps the subscription for its first read."""
        pending = self._subscriptions.pending(event_channel(job_id))

        def confirm_then() -> None:
            pending.confirm()
            if before_row is not None:
                before_row()

        try:
            handle = submit(job_id=job_id, before_row=confirm_then)
        except BaseException:
            pending.give_back()
            raise
        early = pending.take()
        if early is not None and handle.job_id != job_id:  # a replay: another job's stream
            self.give_back(early, job_id)
            early = None
        handle.early = early
        return handle

    def _submit(
        self,
        request: RequestLike,
        *,
        tier: Tier | str,
        priority: Priority | str,
        idempotency_key: str | None,
        owner: str | None,
        require_warm_worker: bool,
        deadline_s: float | None,
        conversation_id: str | None,
        job_id: str | None,
        before_row: Callable[[], None] | None,
        before_send: Callable[[], None],
    ) -> JobHandle:
        started = time.monotonic()
        if conversation_id is not None:
            request = with_conversation(request, conversation_id)
        submission = prepare_submission(
            request,
            tier=str(tier),
            priority=str(priority),
            idempotency_key=idempotency_key,
            owner=owner,
            deadline_s=deadline_s,
            settings=self.settings,
            prompts=self._prompts.registry,
            router=self.router,
        )
        if require_warm_worker:
            self._workers.require_warm(submission.decision.tier)
        before_send()
        prepared = time.monotonic()
        message = self._message_first(submission, job_id)
        before = before_row or _nothing
        if message is not None:
            job = self._enqueue_then_record(submission, message, before)
        else:
            job = self._record_then_enqueue(submission, job_id, before)
        done = time.monotonic()
        if done - started > self.settings.timeouts.slow_submit_log_s:
            # Time a caller waits before its job exists: worth an operator's look.
            log.warning(
                "slow submit of %s job %s: %.0f ms to validate, route and admit, %.0f ms to "
                "record and enqueue",
                submission.options.priority,
                job.id,
                (prepared - started) * 1000,
                (done - prepared) * 1000,
            )
        return JobHandle(
            self, job.id, Tier(job.tier), Priority(job.priority), routed_tier=routed_tier_of(job)
        )

    def submit_embeddings(
        self,
        texts: EmbedInput,
        *,
        priority: Priority | str = Priority.INTERACTIVE,
        idempotency_key: str | None = None,
        owner: str | None = None,
        require_warm_worker: bool = False,
        deadline_s: float | None = None,
        job_id: str | None = None,
    ) -> JobHandle:
        """Enqueue an embedding job for ``texts`` (one text or a list) on the embedding
        tier; return at once with a handle whose result ``producer.embeddings.vectors_of``
        reads. Options mean what they mean for :meth:`submit`. Raises ``InvalidRequest``,
        ``IdempotencyConflict``, ``QueueFull``, ``NoWarmWorker``, ``BrokerUnavailable``
        or ``DatabaseUnavailable``."""
        submission = prepare_embeddings(
            texts,
            priority=str(priority),
            idempotency_key=idempotency_key,
            owner=owner,
            deadline_s=deadline_s,
        )
        job = record_and_enqueue(
            submission,
            sessions=self._sessions,
            enqueuer=self._enqueuer,
            workers=self._workers,
            require_warm_worker=require_warm_worker,
            job_id=job_id,
        )
        return JobHandle(self, job.id, Tier(job.tier), Priority(job.priority))

    def _message_first(self, submission: Submission, job_id: str | None) -> JobMessage | None:
        """The job's message, when it may be sent before its row is written: a new job
        (no idempotency key, which might name an existing one) whose message carries
        its request, so the worker starts the engine on it and waits for the row."""
        options = submission.options
        if options.idempotency_key is not None or options.priority != Priority.INTERACTIVE:
            return None
        message = celery_job_message(
            fresh_job_id(job_id),
            submission.decision.tier,
            options.priority,
            request=submission.request.model_dump(mode="json"),
        )
        return message if message.carries_request else None

    def _enqueue_then_record(
        self, submission: Submission, message: JobMessage, before_row: Callable[[], None]
    ) -> Job:
        """Push ``message``, then write its row: the row's write (a database round trip)
        overlaps the worker's start on the engine instead of delaying it. If the write
        fails the message is taken back; one a worker took already finds no row, waits
        for it (``workers.jobs.claim_job``) and is dropped: nothing runs."""
        started = time.monotonic()
        self._enqueuer.push(message, max_depth=self._max_depth(submission))
        self._let_the_worker_start()
        try:
            before_row()
            job, _created = self._insert(submission, message.job_id)
        except BaseException:
            self._enqueuer.withdraw(message)
            raise
        if time.monotonic() - started > ROW_WAIT_S / 2:
            self._send_again(job)
        return job

    def _let_the_worker_start(self) -> None:
        """Wait ``row_write_delay_ms`` before writing a pushed job's row.

        The worker reads the message, renders the prompt and hands it to its engine
        first, and only then needs the row (its claim). The insert's
        CPU (and the database's) would compete with that start where producer, worker
        and engine share a host's free cores, as on a small CPU host (what the delay is
        worth there: docs/architecture.md, "The job row's insert"). Where they do not
        share cores the row still lands long before the first token.
        """
        delay_ms = self.settings.row_write_delay_ms
        if delay_ms > 0:
            time.sleep(delay_ms / 1000.0)

    def _send_again(self, job: Job) -> None:
        """A plain message for a job whose row came late: a worker that gave up waiting
        for the row dropped the first; a worker that took it claims, and this one then
        finds the job running and is dropped. If it cannot be sent, the reaper's sweep
        sends one."""
        try:
            self._enqueuer.enqueue(job.id, tier=Tier(job.tier), priority=Priority(job.priority))
        except LlmqError as exc:
            log.warning("job %s: could not send its message again (%s)", job.id, exc)

    def _record_then_enqueue(
        self, submission: Submission, job_id: str | None, before_row: Callable[[], None]
    ) -> Job:
        """Write the row, then push its message; the row is removed if the push fails."""
        before_row()
        job, created = self._insert(submission, job_id)
        if created:
            try:
                self._enqueuer.enqueue(
                    job.id,
                    tier=submission.decision.tier,
                    priority=submission.options.priority,
                    max_depth=self._max_depth(submission),
                    # The stored request: the message may carry a copy (interactive
                    # jobs; schemas.messages decides) for the worker to start on.
                    request=job.request,
                )
            except BaseException:  # nothing is left half-enqueued, whatever stopped it
                delete_job(self._sessions, job.id)
                raise
        return job

    def _insert(self, submission: Submission, job_id: str | None) -> tuple[Job, bool]:
        return insert_job(
            self._sessions,
            owner=submission.options.owner,
            request_hash=submission.request_hash,
            request=submission.request,
            decision=submission.decision,
            priority=submission.options.priority,
            idempotency_key=submission.options.idempotency_key,
            deadline_s=submission.options.deadline_s,
            job_id=job_id,
        )

    def _max_depth(self, submission: Submission) -> int | None:
        tier = self.settings.tier(submission.decision.tier)
        return tier.max_queue_depth.get(submission.options.priority)

    def warm(self) -> None:
        """Pay one-time costs now: tokenizers (and system prompts' counts), Redis, broker
        and database connections.

        Raises ``BrokerUnavailable`` or ``DatabaseUnavailable`` if either is down.
        """
        preload_tokenizers(self.settings, self._prompts.registry)
        with broker_boundary("reach Redis"):
            self._redis.ping()
        self._enqueuer.connect()
        check_database(self._sessions)

    def ready(self) -> None:
        """Whether Redis and the job database answer now: one ping and one read, nothing
        written. Raises ``BrokerUnavailable`` or ``DatabaseUnavailable``."""
        with broker_boundary("reach Redis"):
            self._redis.ping()
        probe_database(self._sessions)

    def count_tokens(self, text: str, tier: Tier) -> int:
        """Tokens of ``text`` by ``tier``'s tokenizer, else the conservative estimate
        that submit's length check uses."""
        return count_text_tokens(text, tokenizer_file(self.settings, tier))

    def reload_prompts(self) -> bool:
        """Re-read the prompts folders (a new version was deployed); True if any changed."""
        return self._prompts.reload()

    @property
    def prompts(self) -> PromptRegistry:
        """The registered system prompts as this client last read them."""
        return self._prompts.registry

    @property
    def redis(self) -> redis.Redis:
        """The Redis connection this client publishes and streams with."""
        return self._redis

    @property
    def sessions(self) -> sessionmaker[Session]:
        """The job database's session factory (for read-only lookups such as API keys)."""
        return self._sessions

    def handle(self, job_id: str) -> JobHandle:
        """A handle on an existing job; raises ``JobNotFound``."""
        job = self.job(job_id)
        return JobHandle(self, job.id, Tier(job.tier), Priority(job.priority))

    def job(self, job_id: str) -> Job:
        """The job's row as it is now; raises ``JobNotFound`` or ``DatabaseUnavailable``."""
        return load_job(self._sessions, job_id)

    def queue_depths(self) -> list[QueueDepth]:
        """Messages waiting on every tier queue; raises ``BrokerUnavailable``."""
        with broker_boundary("read the queue depths"):
            return queue_depths(self._redis)

    def cancel(self, job_id: str) -> None:
        """Cancel a job; it ends with status cancelled and an error event on its stream.

        A queued job never runs; a running one is aborted in its engine, which frees
        its slot at once. A job that already ended is left as it is. Raises
        ``JobNotFound``, ``BrokerUnavailable`` or ``DatabaseUnavailable``.
        """
        if JobStatus(load_job(self._sessions, job_id).status).is_final:
            return
        ttl_s = self.settings.replay_ttl_s
        with broker_boundary(f"cancel job {job_id}"):
            if cancel_if_queued(self._sessions, job_id):
                close_stream(
                    self._redis, job_id, CANCELLED_MESSAGE, ttl_s=ttl_s, status="cancelled"
                )
            else:
                request_cancel(self._redis, job_id, ttl_s=ttl_s)

    def cancel_batch_jobs(self, batch_id: str, *, scope: str = "", keys: Sequence[str] = ()) -> int:
        """Cancel every unfinished job of a batch at once: one ``UPDATE`` cancels the
        queued ones, whose streams are then closed, and one pipeline asks the workers of
        the running ones to abort them. ``keys`` (idempotency keys of ``scope``, the
        batch's owner) also reach its jobs not yet linked to it. The number of jobs
        stopped or asked to stop. Raises ``BrokerUnavailable`` or ``DatabaseUnavailable``.
        """
        cancelled, running = cancel_batch_rows(self._sessions, batch_id, scope=scope, keys=keys)
        ttl_s = self.settings.replay_ttl_s
        with broker_boundary(f"cancel the jobs of batch {batch_id}"):
            for start in range(0, len(cancelled), CANCEL_PIPELINE):
                chunk = cancelled[start : start + CANCEL_PIPELINE]
                close_streams(
                    self._redis, chunk, CANCELLED_MESSAGE, ttl_s=ttl_s, status="cancelled"
                )
            request_cancels(self._redis, running, ttl_s=ttl_s)
        return len(cancelled) + len(running)

    def status(self, job_id: str) -> JobStatus:
        """The job's current status as recorded in the database."""
        return JobStatus(load_job(self._sessions, job_id).status)

    def events(
        self,
        job_id: str,
        *,
        from_seq: int = 0,
        timeout: float | None = None,
        early: SyncPubSub | None = None,
    ) -> Generator[Event, None, None]:
        """A job's stream events from ``from_seq`` on, ending with the terminal event;
        ``early``: the subscription ``submit(subscribe=True)`` made for this job."""
        return read_events(
            self._redis,
            job_id,
            from_seq=from_seq,
            timeout=timeout,
            subscriptions=self._subscriptions,
            early=early,
            **self.stream_recovery(job_id),
        )

    def stream_recovery(self, job_id: str) -> StreamRecovery:
        """How a reader of ``job_id``'s stream gets past a lost log or connection: the
        job row's terminal event, and the settings' reconnect budget (the asyncio
        client reads rows in batches instead: ``producer.terminal_rows``)."""
        return {
            "terminal_lookup": partial(self.terminal_event, job_id),
            "reconnect_budget_s": self.settings.timeouts.stream_reconnect_s,
        }

    def give_back(self, early: SyncPubSub, job_id: str) -> None:
        """Return a subscription to ``job_id``'s stream that will not be read."""
        self._subscriptions.give_back(early, event_channel(job_id))

    def terminal_event(self, job_id: str, seq: int) -> TerminalEvent | None:
        """The outcome recorded on the job row as event ``seq``, or None while it runs."""
        return terminal_event_from_row(load_job(self._sessions, job_id), seq)

    def close(self) -> None:
        """Release Redis, broker and database connections."""
        self._workers.close()
        self._subscriptions.close()
        self._enqueuer.close()
        self._redis.close()
        self._db.dispose()

    def __enter__(self) -> Client:
        return self

    def __exit__(self, *_exc: object) -> None:
        self.close()


class JobHandle(HandleCore[Client, SyncPubSub]):
    """One submitted job: stream its text or wait for its result (from one thread at a
    time)."""

    def events(
        self, *, from_seq: int = 0, timeout: float | None = None
    ) -> Generator[Event, None, None]:
        """Every stream event from ``from_seq``, in order, each exactly once."""
        early, stale = self._take_early(from_seq)
        if stale is not None:
            self.client.give_back(stale, self.job_id)
        events = self.client.events(self.job_id, from_seq=from_seq, timeout=timeout, early=early)
        for event in events:
            yield self._seen(event)

    def close(self) -> None:
        """Give back the subscription ``submit`` sent ahead, if no read took it."""
        early = self._take_unread()
        if early is not None:
            self.client.give_back(early, self.job_id)

    def cancel(self) -> None:
        """Cancel this job; see :meth:`Client.cancel`."""
        self.client.cancel(self.job_id)

    def stream(self, *, timeout: float | None = None) -> Iterator[str]:
        """Yield text chunks as they are generated; raises ``JobFailed`` on a job error.

        After a worker crash the job's next attempt continues the same text, so the
        chunks still add up to one answer.
        """
        for event in self.events(timeout=timeout):
            chunk = self._chunk(event)
            if chunk is not None:
                yield chunk

    def result(self, *, timeout: float | None = None) -> JobResult:
        """Wait for the final text and timings; raises ``JobFailed`` or ``JobTimeout``."""
        logprobs: dict[int, list[TokenLogprob]] = {}
        if not self._ended:
            for event in self.events(timeout=timeout):
                logprobs = with_logprobs(logprobs, event)
        return self._result(logprobs)
