"""``llmq bench mixed``'s replay against a tiny fake OpenAI-compatible server."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, ClassVar

import pytest

from bench.goodput import side_figures
from bench.mixed import Replay
from bench.mixed_target import Target, request_arguments
from bench.trace import Event

openai = pytest.importorskip("openai")

SLOW = "slow"
BROKEN = "broken"
EMPTY = "empty"


class _FakeOpenAI(BaseHTTPRequestHandler):
    """Streams "a b c" one word a chunk; a SLOW message waits 30 s first, BROKEN is a 500,
    EMPTY ends (``stop``, one token) with no text."""

    seen: ClassVar[list[dict[str, Any]]] = []

    def log_message(self, *args: Any) -> None:
        pass

    def do_POST(self) -> None:
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        _FakeOpenAI.seen.append(body)
        last = body["messages"][-1]["content"]
        if last == BROKEN:
            self.send_response(500)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"error": {"message": "boom"}}')
            return
        self.send_response(200)
        self.send_header("Content-Type", "text/event-stream")
        self.end_headers()
        if last == SLOW:
            time.sleep(30)
        if last == EMPTY:
            self._event({"choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]})
            self._event({"choices": [], "usage": _usage(1)})
            self.wfile.write(b"data: [DONE]\n\n")
            return
        try:
            for word in ("a ", "b ", "c"):
                self._event({"choices": [{"index": 0, "delta": {"content": word}}]})
                time.sleep(0.01)
            self._event({"choices": [], "usage": _usage(3)})
            self.wfile.write(b"data: [DONE]\n\n")
        except OSError:
            pass

    def _event(self, payload: dict[str, Any]) -> None:
        chunk = {"id": "chatcmpl-1", "object": "chat.completion.chunk", "created": 0}
        chunk["model"] = "fake"
        data = json.dumps({**chunk, **payload})
        self.wfile.write(f"data: {data}\n\n".encode())
        self.wfile.flush()


def _usage(tokens: int) -> dict[str, int]:
    return {"prompt_tokens": 5, "completion_tokens": tokens, "total_tokens": 5 + tokens}


@pytest.fixture
def server() -> Iterator[str]:
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _FakeOpenAI)
    httpd.daemon_threads = True
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    _FakeOpenAI.seen = []
    try:
        yield f"http://127.0.0.1:{httpd.server_address[1]}"
    finally:
        httpd.shutdown()
        httpd.server_close()


def _event(t: float, kind: str, content: str, prompt: str | None = None) -> Event:
    return Event(
        t=t,
        kind="batch" if kind == "batch" else "interactive",
        messages=({"role": "user", "content": content},),
        max_tokens=8,
        system_prompt=prompt,
    )


def test_replay_records_answers_failures_and_cuts_batch_work_at_the_end(server: str) -> None:
    target = Target(server, "none", "fake", "fake", inline_prompts={"support@1": "SYSTEM"})
    sdk = openai.OpenAI(base_url=server + "/v1", api_key="none", max_retries=0, timeout=60)
    events = [
        _event(0.0, "interactive", "hello", "support@1"),
        _event(0.1, "batch", "summarize this"),
        _event(0.2, "batch", SLOW),
        _event(0.3, "interactive", BROKEN),
        _event(0.5, "interactive", "again"),
        _event(0.6, "batch", EMPTY),
    ]
    replay = Replay(sdk, target, events)
    started = time.monotonic()
    replay.run(1.5)
    assert time.monotonic() - started < 10  # the slow batch request was cut, not awaited
    by_index = {o.index: o for o in replay.outcomes}
    assert len(by_index) == len(events)
    assert by_index[0].ok and by_index[0].text == "a b c" and by_index[0].tokens == 3
    assert by_index[0].ttft_ms is not None and by_index[0].e2e_ms is not None
    assert by_index[0].ttft_ms <= by_index[0].e2e_ms
    assert by_index[1].ok and by_index[1].kind == "batch"
    assert by_index[2].cut and not by_index[2].ok and by_index[2].error is None
    assert not by_index[3].ok and by_index[3].error is not None
    assert by_index[3].error.startswith("InternalServerError 500:")
    assert by_index[4].ok
    # An answer with no text is a failure that says what the stream said of itself.
    assert not by_index[5].ok
    assert by_index[5].error == "no text (finish_reason stop, 1 completion tokens)"
    # vLLM gets the registered prompt's text as a system message.
    first = next(b for b in _FakeOpenAI.seen if b["messages"][-1]["content"] == "hello")
    assert first["messages"][0] == {"role": "system", "content": "SYSTEM"}
    assert first["stream"] is True and first["temperature"] == 0.0

    figures = side_figures(replay.outcomes, flood_s=1.0, cost_weight=2.0)
    assert figures.failed == 2
    assert figures.batch_completed == 1 and figures.batch_cut == 1
    assert figures.batch_tok_s == 3.0
    assert figures.interactive_ok == 2
    assert figures.cost > 0


def test_llmq_requests_name_the_prompt_and_ask_for_batch_priority() -> None:
    target = Target("http://x", "k", "auto", "auto", None, {"priority": "batch"})
    chat = request_arguments(target, _event(0, "interactive", "hi", "support@1"))
    assert chat["model"] == "auto"
    assert chat["messages"] == [{"role": "user", "content": "hi"}]
    assert chat["extra_body"] == {"system_prompt": "support@1"}
    batch = request_arguments(target, _event(0, "batch", "sum", "summarize@1"))
    assert batch["extra_body"] == {"system_prompt": "summarize@1", "priority": "batch"}
    assert batch["stream_options"] == {"include_usage": True}


def test_llmq_bench_mixed_passes_its_options(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import bench.mixed
    from producer.cli import main
    from schemas.queues import Tier

    seen: dict[str, Any] = {}

    def fake(settings: object, **values: Any) -> dict[str, Any]:
        seen.update(values)
        return {"bench": "mixed"}

    monkeypatch.setattr(bench.mixed, "run_mixed", fake)
    assert main(["bench", "mixed", "--minutes", "0.5", "--with-restart", "--json"]) == 0
    assert seen == {
        "minutes": 0.5,
        "seed": 7,
        "with_restart": True,
        "interactive_rate": 0.25,
        "batch_rate": 2.0,
        "sides": ("vllm_fcfs", "vllm_priority", "vllm_capped", "llmq"),
        "blocks": 1,
        "flood_cap": 8,
        "flood_rates": (),
        "tier": None,
    }
    assert json.loads(capsys.readouterr().out.splitlines()[-1])["bench"] == "mixed"
    argv = ["bench", "mixed", "--json", "--tier", "large", "--sides", "llmq,vllm_priority"]
    assert main([*argv, "--blocks", "2", "--flood-rates", "1,4"]) == 0
    assert seen["with_restart"] is False and seen["minutes"] == 2.0
    assert seen["tier"] is Tier.LARGE and seen["sides"] == ("llmq", "vllm_priority")
    assert seen["blocks"] == 2 and seen["flood_rates"] == (1.0, 4.0)


def test_a_capped_client_keeps_at_most_its_cap_of_batch_in_flight(server: str) -> None:
    """The vllm_capped side's flood: never more than ``batch_cap`` batch streams open."""
    events = [_event(0.01 * i, "batch", f"b{i}") for i in range(6)]
    target = Target(server, "k", "m", "m", None, batch_cap=2)
    replay = Replay(openai.OpenAI(base_url=server + "/v1", api_key="k"), target, events)
    replay.run(5.0)
    done = [o for o in replay.outcomes if o.ok]
    assert len(done) == 6
    spans = sorted((o.sent, o.finished) for o in done)
    most = max(sum(1 for s, f in spans if s <= t < f) for t, _ in spans)  # type: ignore[operator]
    assert most <= 2
