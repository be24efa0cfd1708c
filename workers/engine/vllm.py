"""vLLM backend: one ``AsyncLLM`` owned by one event loop in one dedicated thread.

``LLM.generate`` is not thread-safe, and Celery runs tasks in a thread pool. So the
async engine lives on its own loop; each task thread submits with
``run_coroutine_threadsafe`` and reads deltas from a queue. All requests meet in one
engine, which batches them continuously.
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import dataclasses
import logging
import os
import queue
import threading
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from schemas.errors import EngineDead, EngineError
from schemas.events import TokenLogprob, TopLogprob
from schemas.sampling import Sampling, StructuredOutput
from schemas.settings import TierConfig
from schemas.timeouts import DEFAULT_TIMEOUTS
from workers.engine.base import Delta, DeltaStream, EngineRequest, SamplingOptions

if TYPE_CHECKING:
    from vllm.v1.engine.async_llm import AsyncLLM

log = logging.getLogger(__name__)

START_TIMEOUT_S = DEFAULT_TIMEOUTS.engine_start_s
"""The default of ``settings.timeouts.engine_start_s`` (the benches wait for their
servers this long too)."""
CPU_KV_CACHE_GB = 2.0
CPU_BLOCK_SIZE = 32
_END = object()
# Not a setting: a hand-over inside the engine wrapper, not a bound anyone relies on.
# How long ``stream`` waits for the engine to take a request before it returns anyway.
HANDOVER_WAIT_S = 0.005


class VllmEngine:
    """A started vLLM engine serving one model; safe to use from many threads."""

    def __init__(self, *, model_path: str, config: TierConfig) -> None:
        self._model_path = model_path
        self._config = config
        self._loop = engine_event_loop()
        self._thread = threading.Thread(target=self._run_loop, name="vllm-loop", daemon=True)
        self._engine: AsyncLLM | None = None
        self._tokenizer: Any = None
        self._tokenizer_lock = threading.Lock()
        self._closed = False
        self.dead = False
        # Requests whose hand-over to the engine a thread waits on, by request id.
        self._handovers: dict[str, threading.Event] = {}

    @classmethod
    def start(
        cls, *, model_path: str, config: TierConfig, timeout_s: float = START_TIMEOUT_S
    ) -> VllmEngine:
        """Load the model and return a ready engine within ``timeout_s``; raises
        ``EngineError`` on failure."""
        engine = cls(model_path=model_path, config=config)
        engine._thread.start()
        future = asyncio.run_coroutine_threadsafe(engine._build(), engine._loop)
        try:
            future.result(timeout=timeout_s)
        except Exception as exc:
            engine.shutdown()
            raise EngineError(f"vLLM could not start {model_path}: {exc}") from exc
        return engine

    def _run_loop(self) -> None:
        asyncio.set_event_loop(self._loop)
        self._loop.run_forever()

    async def _build(self) -> None:
        from transformers import AutoTokenizer
        from vllm.engine.arg_utils import AsyncEngineArgs
        from vllm.v1.engine.async_llm import AsyncLLM

        args = AsyncEngineArgs(**engine_arguments(self._model_path, self._config))
        if args.enforce_eager:
            compile_nothing()
        self._engine = AsyncLLM.from_engine_args(args)
        self._tokenizer = AutoTokenizer.from_pretrained(self._model_path)
        self._signal_handovers(self._engine)

    def _signal_handovers(self, engine: AsyncLLM) -> None:
        """Have the engine's ``add_request`` (which ``generate`` awaits first) wake the
        thread waiting in ``stream`` once the request is with the engine core."""
        add_request = engine.add_request

        async def add_request_then_signal(*args: Any, **kwargs: Any) -> Any:
            try:
                return await add_request(*args, **kwargs)
            finally:
                request_id = args[0] if args else kwargs.get("request_id")
                handover = self._handovers.pop(str(request_id), None)
                if handover is not None:
                    handover.set()

        engine.add_request = add_request_then_signal  # type: ignore[method-assign]

    @property
    def max_model_len(self) -> int:
        return self._config.max_model_len

    def alive(self) -> bool:
        """False once the engine's processes are gone (killed, crashed) or it was shut down."""
        if self._closed or self.dead or self._engine is None:
            return False
        return not self._engine.errored

    def render_chat(self, messages: Sequence[dict[str, str]]) -> list[int]:
        # Fast tokenizers are not safe to share between threads.
        with self._tokenizer_lock:
            rendered = self._tokenizer.apply_chat_template(
                list(messages), add_generation_prompt=True, tokenize=True, return_dict=True
            )
        return list(rendered["input_ids"])

    def render_chat_with_tools(
        self,
        messages: Sequence[Mapping[str, Any]],
        tools: Sequence[Mapping[str, Any]] | None,
    ) -> list[int] | None:
        with self._tokenizer_lock:
            if not template_has_tools(self._tokenizer.chat_template):
                return None
            rendered = self._tokenizer.apply_chat_template(
                [dict(m) for m in messages],
                tools=[dict(t) for t in tools] if tools else None,
                add_generation_prompt=True,
                tokenize=True,
                return_dict=True,
            )
        return list(rendered["input_ids"])

    def render_prompt(self, text: str) -> list[int]:
        # As vLLM's own /v1/completions does (its add_special_tokens defaults to true).
        with self._tokenizer_lock:
            return list(self._tokenizer.encode(text, add_special_tokens=True))

    def encode(self, text: str) -> list[int]:
        with self._tokenizer_lock:
            return list(self._tokenizer.encode(text, add_special_tokens=False))

    def stream(self, request: EngineRequest, *, stop: threading.Event | None = None) -> DeltaStream:
        if self._engine is None or self._closed:
            raise EngineError("the engine is not running")
        deltas: queue.SimpleQueue[Any] = queue.SimpleQueue()
        # An answer that goes out in one piece is held on the engine's loop; the
        # reader may take what it holds after a stop (``_Submitted.held``).
        held: list[Delta] | None = None if request.options.stream_tokens else []
        handover = self._handovers[request.request_id] = threading.Event()
        # Submitted now, not at the first ``next``: a caller may start the request and
        # do other work (the job's claim) while the engine computes the first token.
        future = asyncio.run_coroutine_threadsafe(self._pump(request, deltas, held), self._loop)
        # But only once the engine has it: the hand-over is Python on the engine's loop
        # thread, and the caller's next work (a claim's SQL) would take the GIL from it
        # and delay the first token (docs/architecture.md, "The claim").
        handover.wait(HANDOVER_WAIT_S)
        self._handovers.pop(request.request_id, None)
        return _Submitted(future, self._read(future, deltas, stop), held)

    def _read(
        self,
        future: concurrent.futures.Future[None],
        deltas: queue.SimpleQueue[Any],
        stop: threading.Event | None,
    ) -> Generator[Delta, None, None]:
        pending: Any = None
        try:
            while True:
                item = (
                    pending
                    if pending is not None
                    else _next_delta(deltas, stop, lambda: self._closed)
                )
                pending = None
                if item is _END or item is _STOPPED:
                    return
                if item is _CLOSED:
                    raise EngineError("the engine shut down during generation")
                if isinstance(item, BaseException):
                    if type(item).__name__ == "EngineDeadError":
                        self.dead = True
                        raise EngineDead(f"the engine process died: {item}") from item
                    raise EngineError(f"generation failed: {item}") from item
                item, pending = _coalesce(item, deltas)
                yield item
        finally:
            # Cancelling the coroutine makes vLLM abort the request and free its slot.
            if not future.done():
                future.cancel()

    async def _pump(
        self, request: EngineRequest, deltas: queue.SimpleQueue[Any], held: list[Delta] | None
    ) -> None:
        assert self._engine is not None
        completion_tokens = 0
        options = request.options
        top = options.sampling.logprobs if options.sampling is not None else None
        # An answer that goes out in one piece (batch work; ``held`` is a list) is held
        # here, on the engine's loop: its reader gets one empty delta at the first
        # token (the end of its prefill, which the worker's scheduling waits for) and
        # then the whole answer, not a wake-up per token.
        try:
            async for output in self._engine.generate(
                engine_input(request.prompt_token_ids),
                sampling_params(options),
                request.request_id,
                priority=options.priority,
            ):
                completion = output.outputs[0]
                completion_tokens += len(completion.token_ids)
                delta = Delta(
                    text=completion.text,
                    completion_tokens=completion_tokens,
                    finished=output.finished,
                    finish_reason=completion.finish_reason,
                    cached_tokens=output.num_cached_tokens,
                    logprobs=token_logprobs(completion, top),
                )
                if held is None:
                    deltas.put(delta)
                    continue
                if not held:
                    deltas.put(dataclasses.replace(delta, text="", logprobs=(), finished=False))
                held.append(delta)
                if output.finished:
                    deltas.put(merged_deltas(held))
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # noqa: BLE001 - handed to the consuming thread, which raises
            deltas.put(exc)
        finally:
            deltas.put(_END)

    def in_flight(self) -> int:
        if self._engine is None:
            return 0
        return int(self._engine.get_num_unfinished_requests())

    def shutdown(self) -> None:
        if self._closed:
            return
        self._closed = True
        if self._engine is not None:
            try:
                self._engine.shutdown()
            except Exception:
                log.warning("engine shutdown raised", exc_info=True)
            # Dropping the reference keeps AsyncLLM.__del__ from shutting down
            # a second time during interpreter teardown.
            self._engine = None
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=10)


class _Submitted:
    """A submitted request's deltas; closing it aborts the request, read from or not
    (a generator never started would skip its ``finally`` on close)."""

    def __init__(
        self,
        future: concurrent.futures.Future[None],
        deltas: Generator[Delta, None, None],
        held: list[Delta] | None = None,
    ) -> None:
        self._future = future
        self._deltas = deltas
        self._held = held

    def held(self) -> Delta | None:
        # The engine's loop appends while this thread reads: a copy of the list is
        # each delta whole, the latest perhaps not yet among them.
        parts = list(self._held or ())
        if not parts or parts[-1].finished:
            return None  # nothing held, or the whole answer was handed over
        return merged_deltas(parts)

    def __iter__(self) -> Iterator[Delta]:
        return self

    def __next__(self) -> Delta:
        return next(self._deltas)

    def close(self) -> None:
        if not self._future.done():
            self._future.cancel()
        self._deltas.close()


_STOPPED = object()
_CLOSED = object()
# Not a setting: an inner poll of the engine wrapper; callers bound waits by deadlines.
# How often a waiting stream looks at its stop event and at the engine: a cancelled
# request that the engine has not scheduled yet still gives up its place within this
# long, and no thread waits forever on an engine that was shut down.
STOP_POLL_S = 0.1


def engine_input(prompt_token_ids: list[int]) -> Any:
    """A prompt's token ids as vLLM's own server hands them to its engine: rendered (a
    ``TokensInput``, typed "token").

    ``AsyncLLM.add_request`` builds the engine request from a rendered input on its
    loop, at once; a raw one (``{"prompt_token_ids": ...}``) it sends through its
    renderer's thread pool and back, a hop to another thread and a wake-up on the
    way to every first token.
    """
    from vllm.inputs import tokens_input

    return tokens_input(prompt_token_ids)


def merged_deltas(parts: Sequence[Delta]) -> Delta:
    """One delta carrying what ``parts`` (in order, at least one) carried together."""
    last = parts[-1]
    return Delta(
        text="".join(part.text for part in parts),
        completion_tokens=last.completion_tokens,
        finished=last.finished,
        finish_reason=next((p.finish_reason for p in reversed(parts) if p.finish_reason), None),
        cached_tokens=next((p.cached_tokens for p in parts if p.cached_tokens is not None), None),
        logprobs=tuple(entry for part in parts for entry in part.logprobs),
    )


def _coalesce(first: Delta, deltas: queue.SimpleQueue[Any]) -> tuple[Delta, Any]:
    """``first`` merged with the deltas already waiting behind it, and the first item
    that is not one (or None).

    When this thread falls behind the engine (a busy host, many streams), one publish
    then carries several tokens instead of one Redis round trip and one reader wake-up
    each; when it keeps up, nothing waits and nothing changes.
    """
    parts = [first]
    pending: Any = None
    while not parts[-1].finished:
        try:
            item = deltas.get_nowait()
        except queue.Empty:
            break
        if not isinstance(item, Delta):
            pending = item
            break
        parts.append(item)
    return (first if len(parts) == 1 else merged_deltas(parts)), pending


def _next_delta(
    deltas: queue.SimpleQueue[Any], stop: threading.Event | None, closed: Callable[[], bool]
) -> Any:
    while True:
        if stop is not None and stop.is_set():
            return _STOPPED
        if closed():
            return _CLOSED
        try:
            return deltas.get(timeout=STOP_POLL_S)
        except queue.Empty:
            continue


def template_has_tools(template: object) -> bool:
    """Whether a chat template renders tools (and so tool turns) itself; the bundled
    models' templates do not."""
    return isinstance(template, str) and "tools" in template


def engine_event_loop() -> asyncio.AbstractEventLoop:
    """The event loop the engine runs on: uvloop's where it is installed, as under
    vLLM's own server, else asyncio's.

    Every token of every request passes through this loop (the engine's output
    handler, then a hand-off to the job's thread), and a job thread wakes it for each
    request it submits; uvloop does both for less than asyncio's own loop.
    """
    try:
        import uvloop
    except ImportError:
        return asyncio.new_event_loop()
    return uvloop.new_event_loop()


def compile_nothing() -> None:
    """Have the engine processes started from here run eagerly throughout.

    An eager engine (every CPU tier's default) compiles no model, but vLLM still wraps
    a few sampler helpers in ``torch.compile``, the ranks of log probabilities among
    them: compiled at the first request that asks for log probabilities, seconds during
    which the whole engine waits, every stream with it. Eager, they cost nothing. An
    operator's own ``TORCHDYNAMO_DISABLE`` is left as it is; the processes inherit it.
    """
    os.environ.setdefault("TORCHDYNAMO_DISABLE", "1")


CPU_LONG_PREFILL_TOKENS = 128
"""A prompt's tokens per engine step on a CPU host while other requests run."""


def engine_arguments(model_path: str, config: TierConfig) -> dict[str, Any]:
    """``AsyncEngineArgs`` for a tier; on a CPU host, the settings measured to work there."""
    on_cpu = running_on_cpu()
    dtype = config.dtype
    if dtype == "auto" and on_cpu:
        dtype = cpu_dtype()
    enforce_eager = config.enforce_eager if config.enforce_eager is not None else on_cpu
    kv_cache_gb = config.kv_cache_memory_gb
    if kv_cache_gb is None and on_cpu:
        # A fraction of host memory would reserve gigabytes a small model never uses
        # and refuse to start beside a second engine.
        kv_cache_gb = CPU_KV_CACHE_GB
    block_size = config.block_size
    if block_size is None and on_cpu:
        # Only whole blocks are cached: vLLM's CPU default of 128 leaves up to 127
        # tokens of every system prompt to recompute; 32 is the smallest it supports.
        block_size = CPU_BLOCK_SIZE
    long_prefill = config.long_prefill_tokens
    if long_prefill is None and on_cpu:
        # A CPU step lasts as long as its tokens are many: a whole batch prompt in one
        # step is a wait of a second or more for every person's next token.
        long_prefill = CPU_LONG_PREFILL_TOKENS
    # Left out unless set: vLLM then picks its own (it has no "unset" for these).
    step_limits = {
        "max_num_batched_tokens": config.max_num_batched_tokens,
        "long_prefill_token_threshold": long_prefill,
    }
    return {
        **{name: value for name, value in step_limits.items() if value is not None},
        "model": model_path,
        "block_size": block_size,
        "dtype": dtype,
        "quantization": config.quantization,
        "max_model_len": config.max_model_len,
        "gpu_memory_utilization": config.gpu_memory_utilization,
        "kv_cache_memory_bytes": None if kv_cache_gb is None else int(kv_cache_gb * 2**30),
        "enforce_eager": enforce_eager,
        "enable_prefix_caching": True,
        "max_num_seqs": max(config.concurrency, 1),
        # Interactive requests jump the engine's waiting queue (SamplingOptions.priority);
        # with one priority in use this schedules exactly as first-come-first-served.
        "scheduling_policy": config.scheduling_policy,
        "disable_log_stats": True,
    }


# /proc/cpuinfo flags of CPUs that multiply bfloat16 in hardware.
BF16_HARDWARE_FLAGS = frozenset({"amx_bf16", "avx512_bf16"})


def cpu_dtype(cpuinfo: Path = Path("/proc/cpuinfo")) -> Literal["bfloat16", "float32"]:
    """The faster dtype for this CPU: bfloat16 where it multiplies bfloat16 in hardware
    (AMX, or AVX-512 BF16), else float32.

    Without such hardware bfloat16 is emulated and slower than float32;
    ``llmq bench quant`` measures the two on a host (docs/quality.md).
    """
    try:
        flags = set(cpuinfo.read_text(encoding="utf-8", errors="replace").split())
    except OSError:
        return "float32"
    return "bfloat16" if flags & BF16_HARDWARE_FLAGS else "float32"


def running_on_cpu() -> bool:
    """True when no GPU is visible to this process."""
    if os.environ.get("CUDA_VISIBLE_DEVICES", None) == "":
        return True
    from vllm.platforms import current_platform

    return bool(current_platform.is_cpu())


def sampling_params(options: SamplingOptions) -> Any:
    """vLLM ``SamplingParams``: deltas as they come, or only the final text."""
    from vllm.sampling_params import RequestOutputKind, SamplingParams

    extras = options.sampling or Sampling()
    return SamplingParams(
        max_tokens=options.max_tokens,
        temperature=options.temperature,
        top_p=options.top_p,
        stop=list(options.stop) or None,
        seed=options.seed,
        # ``Sampling``'s other fields bear ``SamplingParams``' own names and meanings.
        **extras.model_dump(exclude={"structured"}),
        structured_outputs=structured_outputs(extras.structured),
        # Deltas for batch work too: its first token frees its prefill place
        # (``workers.scheduler``); ``VllmEngine._pump`` holds its text.
        output_kind=RequestOutputKind.DELTA,
    )


def token_logprobs(completion: Any, top: int | None) -> tuple[TokenLogprob, ...]:
    """A vLLM ``CompletionOutput``'s new tokens with their log probabilities and ``top``
    alternatives each (the engine adds the sampled token where it is not among them);
    nothing when ``top`` is None (the request did not ask)."""
    if top is None or not completion.logprobs:
        return ()
    tokens = []
    for token_id, position in zip(completion.token_ids, completion.logprobs, strict=False):
        ranked = sorted(position.items(), key=lambda item: item[1].rank or 0)
        chosen = position.get(token_id)
        if chosen is None:  # not expected: the engine always reports the sampled token
            continue
        tokens.append(
            TokenLogprob(
                **_top_logprob(chosen),
                top_logprobs=[TopLogprob(**_top_logprob(lp)) for _, lp in ranked[:top]],
            )
        )
    return tuple(tokens)


def _top_logprob(logprob: Any) -> dict[str, Any]:
    text = logprob.decoded_token or ""
    # vLLM reports a -inf log probability for a token the sampler ruled out; JSON has
    # no infinity, and OpenAI's floor for "never" is -9999.
    value = max(float(logprob.logprob), -9999.0)
    return {"token": text, "logprob": value, "bytes": list(text.encode("utf-8", "replace"))}


def structured_outputs(constraint: StructuredOutput | None) -> Any:
    """vLLM's ``StructuredOutputsParams`` for a constraint on the answer, or None.

    The engine's default backend picks the grammar library (xgrammar, else guidance
    where xgrammar lacks a feature of the schema); both run on CPU hosts.
    """
    if constraint is None:
        return None
    from vllm.sampling_params import StructuredOutputsParams

    if constraint.kind == "json_object":
        return StructuredOutputsParams(json_object=True)
    if constraint.kind == "json_schema":
        return StructuredOutputsParams(json=constraint.json_schema)
    if constraint.kind == "choice":
        return StructuredOutputsParams(choice=list(constraint.choice or ()))
    return StructuredOutputsParams(regex=constraint.regex)
