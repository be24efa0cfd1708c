"""llmq bench compat's probes, on hand-written replies and a fake server (no engine)."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from typing import Any

import httpx
import pytest

from bench import compat, compat_probes
from bench.compat_checks import (
    Api,
    ProbeFailed,
    Reply,
    check_completion,
    check_error,
    check_logprobs,
    check_tool_call,
    parse_events,
    read_stream,
)
from bench.compat_probes import PROBES, check_text_completion, run_probe
from schemas.queues import Tier
from schemas.settings import Settings

Json = dict[str, Any]


def completion(text: str = "Hi.", finish: str = "stop", **extra: Any) -> Json:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "created": 1,
        "model": "small",
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": text},
                "finish_reason": finish,
            }
        ],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
        **extra,
    }


def chunk(delta: Json, finish: str | None = None, index: int = 0, **extra: Any) -> Json:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "small",
        "choices": [{"index": index, "delta": delta, "finish_reason": finish, **extra}],
    }


def usage_chunk() -> Json:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "small",
        "choices": [],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }


def stream(*chunks: Json, done: bool = True) -> Reply:
    return Reply(200, chunks=chunks, done=done)


def test_a_chat_completion_in_openais_shape_passes_and_each_flaw_fails() -> None:
    [choice] = check_completion(completion())
    assert choice["message"]["content"] == "Hi."
    flaws: list[Callable[[Json], None]] = [
        lambda b: b.update(object="completion"),
        lambda b: b.pop("id"),
        lambda b: b.pop("usage"),
        lambda b: b["usage"].update(total_tokens=8),
        lambda b: b["choices"][0].update(finish_reason="eos"),
        lambda b: b["choices"][0]["message"].update(role="user"),
        lambda b: b["choices"][0]["message"].update(content=["Hi."]),
        lambda b: b["choices"][0].update(index=1),
    ]
    for flaw in flaws:
        body = completion()
        flaw(body)
        with pytest.raises(ProbeFailed):
            check_completion(body)
    with pytest.raises(ProbeFailed, match="1 choices, not 2"):
        check_completion(completion(), n=2)


def test_a_stream_is_put_together_and_its_usage_chunk_read() -> None:
    streamed = read_stream(
        stream(
            chunk({"role": "assistant", "content": ""}),
            chunk({"content": "Hel"}),
            chunk({"content": "lo"}),
            chunk({}, "stop"),
            usage_chunk(),
        )
    )
    assert streamed.texts == {0: "Hello"}
    assert streamed.finish == {0: "stop"}
    assert streamed.roles == {0: "assistant"}
    assert streamed.usage is not None and streamed.usage["completion_tokens"] == 2


@pytest.mark.parametrize(
    ("reply", "why"),
    [
        (stream(chunk({"content": "a"}, "stop"), done=False), r"\[DONE\]"),
        (stream(chunk({"content": "a"})), "finish_reason"),
        (stream(chunk({"content": "a"}, "stop"), chunk({"content": "b"})), "went on"),
        (stream(chunk({"content": "a"}, "stop"), {**chunk({}), "id": "other"}), "ids"),
        (stream({**chunk({"content": "a"}, "stop"), "usage": usage_chunk()["usage"]}), "usage"),
        (stream(usage_chunk(), chunk({"content": "a"}, "stop")), "not the last"),
        (stream({**chunk({"content": "a"}, "stop"), "object": "chat.completion"}), "object"),
        (stream(chunk({"role": "user"}, "stop")), "role"),
        (Reply(400, {"error": {"message": "no streams"}}), "HTTP 400: no streams"),
    ],
)
def test_a_stream_of_the_wrong_shape_fails(reply: Reply, why: str) -> None:
    with pytest.raises(ProbeFailed, match=why):
        read_stream(reply)


def test_two_streamed_choices_each_need_their_end() -> None:
    both = stream(
        chunk({"role": "assistant", "content": "a"}, index=0),
        chunk({"role": "assistant", "content": "b"}, index=1),
        chunk({}, "length", index=1),
        chunk({}, "stop", index=0),
    )
    assert read_stream(both, n=2).texts == {0: "a", 1: "b"}
    with pytest.raises(ProbeFailed, match="choice indexes"):
        read_stream(stream(chunk({"content": "a"}, "stop")), n=2)


def test_tool_call_deltas_are_joined() -> None:
    first = {"index": 0, "id": "call_1", "type": "function", "function": {"name": "get_weather"}}
    streamed = read_stream(
        stream(
            chunk({"role": "assistant", "tool_calls": [first]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city": '}}]}),
            chunk({"tool_calls": [{"index": 0, "function": {"arguments": '"Paris"}'}}]}),
            chunk({}, "stop"),
        )
    )
    call = streamed.tool_calls[0][0]
    assert (call.id, call.name, json.loads(call.arguments)) == (
        "call_1",
        "get_weather",
        {"city": "Paris"},
    )


def test_server_sent_events_are_read_to_done() -> None:
    lines = [
        ": a comment",
        "id: job.1",
        "event: message",
        'data: {"a": 1}',
        "",
        "data: [DONE]",
        'data: {"after": true}',
    ]
    reply = parse_events(200, iter(lines))
    assert reply.chunks == ({"a": 1},) and reply.done
    assert not parse_events(200, iter(['data: {"a": 1}'])).done


def logprob(token: str, value: float, top: list[str]) -> Json:
    alternatives = [{"token": t, "logprob": value - i} for i, t in enumerate(top)]
    return {"token": token, "logprob": value, "top_logprobs": alternatives}


def test_logprobs_spell_the_text_with_their_alternatives() -> None:
    tokens = [logprob("Hel", -0.1, ["Hel", "He"]), logprob("lo", -0.5, ["lo", "p"])]
    check_logprobs(tokens, "Hello", top=2, completion_tokens=2)
    with pytest.raises(ProbeFailed, match="spell"):
        check_logprobs(tokens, "Help", top=2, completion_tokens=2)
    # An answer that ended by itself may score its end token too (vLLM's server does).
    ended = [*tokens, logprob("<|im_end|>", -0.2, ["<|im_end|>", "!"])]
    check_logprobs(ended, "Hello", top=2, completion_tokens=3, ended=True)
    with pytest.raises(ProbeFailed, match="spell"):
        check_logprobs(ended, "Hello", top=2, completion_tokens=3)
    with pytest.raises(ProbeFailed, match="3 tokens"):
        check_logprobs(tokens, "Hello", top=2, completion_tokens=3)
    with pytest.raises(ProbeFailed, match="top_logprobs, not 3"):
        check_logprobs(tokens, "Hello", top=3, completion_tokens=2)
    with pytest.raises(ProbeFailed, match="likeliest"):
        check_logprobs([logprob("Hel", -0.1, ["He", "Hel"])], "Hel", top=2, completion_tokens=1)
    with pytest.raises(ProbeFailed, match="logprob"):
        check_logprobs([logprob("Hel", 0.5, ["Hel"])], "Hel", top=1, completion_tokens=1)
    with pytest.raises(ProbeFailed, match=r"no logprobs\.content"):
        check_logprobs(None, "", top=0, completion_tokens=None)


def test_a_tool_call_needs_an_id_a_known_name_and_json_arguments() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Rome"}'},
    }
    assert check_tool_call(call, {"get_weather"}) == {"city": "Rome"}
    with pytest.raises(ProbeFailed, match="names"):
        check_tool_call(call, {"get_time"})
    with pytest.raises(ProbeFailed, match="not JSON"):
        check_tool_call(
            {**call, "function": {"name": "get_weather", "arguments": "{"}}, {"get_weather"}
        )
    with pytest.raises(ProbeFailed, match="no id"):
        check_tool_call({**call, "id": ""}, {"get_weather"})


def test_an_error_must_be_openais_shape_and_name_the_field() -> None:
    named = Reply(400, {"error": {"message": "unknown field 'frobnicate_level'"}})
    check_error(named, 400, "frobnicate_level")
    check_error(Reply(400, {"error": {"message": "bad", "param": "x"}}), 400, "x")
    with pytest.raises(ProbeFailed, match="does not name"):
        check_error(Reply(400, {"error": {"message": "bad request"}}), 400, "frobnicate_level")
    with pytest.raises(ProbeFailed, match="HTTP 200"):
        check_error(Reply(200, completion()), 400)
    with pytest.raises(ProbeFailed, match="no error object"):
        check_error(Reply(404, {"detail": "Not Found"}), 404)


def test_a_text_completion_has_its_own_shape() -> None:
    body = {
        "id": "cmpl-1",
        "object": "text_completion",
        "created": 1,
        "model": "small",
        "choices": [{"index": 0, "text": " Paris.", "finish_reason": "stop", "logprobs": None}],
        "usage": {"prompt_tokens": 5, "completion_tokens": 2, "total_tokens": 7},
    }
    assert check_text_completion(body) == " Paris."
    with pytest.raises(ProbeFailed, match="object"):
        check_text_completion(completion())


# --- probes against a fake server ------------------------------------------------------

ANSWER = "one, two, three, four, five, six, seven, eight"


class FakeServer:
    """A small OpenAI server: greedy answers are ANSWER cut at ``stop`` (or at
    max_tokens words); ``honours`` lists the features it serves."""

    def __init__(self, *honours: str) -> None:
        self.honours = set(honours)
        self.bodies: list[Json] = []

    def __call__(self, request: httpx.Request) -> httpx.Response:
        if request.url.path == "/v1/models":
            return httpx.Response(
                200, json={"object": "list", "data": [{"id": "small", "object": "model"}]}
            )
        body = json.loads(request.content)
        self.bodies.append(body)
        if "frobnicate_level" in body and "refuse_unknown" in self.honours:
            message = "unknown field: frobnicate_level"
            return httpx.Response(400, json={"error": {"message": message, "type": "invalid"}})
        text, finish = self.answer(body)
        if "tool_choice" in body and "tools" in self.honours:
            return httpx.Response(200, json=self.tool_answer())
        if body.get("stream"):
            return self.streamed(text, finish)
        return httpx.Response(200, json=completion(text, finish))

    def answer(self, body: Json) -> tuple[str, str]:
        words = ANSWER.split(" ")[: body.get("max_tokens", 24)]
        text, finish = " ".join(words), "length"
        stops = body.get("stop") or []
        for stop in [stops] if isinstance(stops, str) else stops:
            if "stop" in self.honours and stop in text:
                text, finish = text[: text.index(stop)], "stop"
        return text, finish

    def streamed(self, text: str, finish: str) -> httpx.Response:
        pieces = [chunk({"role": "assistant", "content": ""})]
        pieces += [chunk({"content": text[i : i + 5]}) for i in range(0, len(text), 5)]
        pieces.append(chunk({}, finish))
        events = "".join(f"data: {json.dumps(p)}\n\n" for p in pieces) + "data: [DONE]\n\n"
        return httpx.Response(200, text=events, headers={"content-type": "text/event-stream"})

    def tool_answer(self) -> Json:
        body = completion("", "stop")
        call = {
            "id": "call_1",
            "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }
        body["choices"][0]["message"]["tool_calls"] = [call]
        return body


def fake_api(server: FakeServer) -> Api:
    return Api(httpx.Client(base_url="http://fake", transport=httpx.MockTransport(server)), "small")


def probe(name: str) -> compat_probes.Probe:
    return next(p for p in PROBES if p.name == name)


@pytest.mark.parametrize("name", ["stop_string", "stop_list", "stop_streamed"])
def test_a_stop_probe_passes_a_server_that_honours_stop_and_fails_one_that_ignores_it(
    name: str,
) -> None:
    assert run_probe(probe(name), fake_api(FakeServer("stop"))) == {"passed": True, "detail": ""}
    ignored = run_probe(probe(name), fake_api(FakeServer()))
    assert not ignored["passed"] and ignored["detail"].startswith("answer")


def test_the_stop_probes_ask_for_the_free_answer_once() -> None:
    server = FakeServer("stop")
    api = fake_api(server)
    for name in ("stop_string", "stop_list", "stop_streamed"):
        assert run_probe(probe(name), api)["passed"]
    assert len(server.bodies) == 4  # the free answer, then one request per probe
    assert server.bodies[1]["stop"] == "five,"


def test_the_unknown_field_probe_fails_a_server_that_drops_the_field() -> None:
    assert run_probe(probe("unknown_field"), fake_api(FakeServer("refuse_unknown")))["passed"]
    dropped = run_probe(probe("unknown_field"), fake_api(FakeServer()))
    assert dropped == {"passed": False, "detail": "HTTP 200, not 400"}


def test_the_models_and_tools_probes_read_their_replies() -> None:
    assert run_probe(probe("models"), fake_api(FakeServer()))["passed"]
    assert run_probe(probe("tools_named"), fake_api(FakeServer("tools")))["passed"]
    no_tools = run_probe(probe("tools_named"), fake_api(FakeServer()))
    assert no_tools == {"passed": False, "detail": "finish_reason 'length'"}


def test_every_probe_fails_cleanly_on_a_server_that_answers_errors() -> None:
    def broken(request: httpx.Request) -> httpx.Response:
        return httpx.Response(500, text="Internal Server Error")

    results = compat.probe_server(
        "http://fake", "key", "small", label="broken", transport=httpx.MockTransport(broken)
    )
    assert list(results) == [p.name for p in PROBES]
    assert not any(r["passed"] for r in results.values())
    assert all(r["detail"] for r in results.values())


def test_a_probe_that_meets_an_unexpected_shape_fails_instead_of_raising() -> None:
    def garbage(request: httpx.Request) -> httpx.Response:
        return httpx.Response(200, json={"choices": None, "object": "chat.completion"})

    api = Api(httpx.Client(base_url="http://fake", transport=httpx.MockTransport(garbage)), "m")
    for entry in PROBES:
        assert run_probe(entry, api)["passed"] is False


def test_the_probe_list_is_fixed_and_covers_at_least_twenty_features() -> None:
    names = [p.name for p in PROBES]
    assert len(names) == len(set(names)) >= 20
    assert all(p.feature for p in PROBES)


def test_the_report_counts_passes_and_names_what_llmq_misses() -> None:
    probes = PROBES[:3]
    ok, bad = {"passed": True, "detail": ""}, {"passed": False, "detail": "HTTP 400: no"}
    results = {
        "vllm": {probes[0].name: ok, probes[1].name: ok, probes[2].name: bad},
        "llmq": {probes[0].name: ok, probes[1].name: bad, probes[2].name: ok},
    }
    report = compat.compat_report(results, tier=Tier.SMALL, probes=probes)
    assert (report["total"], report["vllm_passed"], report["llmq_passed"]) == (3, 2, 2)
    assert report["llmq_missing"] == [probes[1].name]
    assert report["llmq_only"] == [probes[2].name]
    assert report["probes"][probes[1].name]["llmq"] == bad
    json.dumps(report)
    table = compat.format_table(report)
    assert f"{probes[1].name:<24}pass  FAIL  HTTP 400: no" in table
    assert f"llmq missing: {probes[1].name}" in table


def test_the_sides_run_one_after_the_other_and_their_table_is_printed(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    events: list[str] = []

    @contextlib.contextmanager
    def server(side: str, settings: object, tier: Tier) -> Iterator[tuple[str, str, str]]:
        events.append(f"start {side}")
        yield f"http://{side}", "key", tier.value
        events.append(f"stop {side}")

    def probe_server(base_url: str, api_key: str, model: str, *, label: str) -> Json:
        events.append(f"probe {label}")
        passed = label == "vllm"
        return {p.name: {"passed": passed, "detail": "" if passed else "no"} for p in PROBES}

    monkeypatch.setattr(compat, "_server", server)
    monkeypatch.setattr(compat, "probe_server", probe_server)
    report = compat.run_compat(object(), tier=Tier.SMALL)  # type: ignore[arg-type]
    assert events == [
        "start vllm",
        "probe vllm",
        "stop vllm",
        "start llmq",
        "probe llmq",
        "stop llmq",
    ]
    assert report["vllm_passed"] == report["total"] == len(PROBES)
    assert report["llmq_passed"] == 0
    assert report["llmq_missing"] == [p.name for p in PROBES]
    assert f"passed: vllm {len(PROBES)}/{len(PROBES)}, llmq 0/{len(PROBES)}" in (
        capsys.readouterr().err
    )


def test_the_streamed_n_probe_asks_for_two_choices() -> None:
    bodies: list[Json] = []

    def server(request: httpx.Request) -> httpx.Response:
        body = json.loads(request.content)
        bodies.append(body)
        pieces = [
            chunk({"role": "assistant", "content": "a"}, "length", index=i)
            for i in range(body.get("n", 1))
        ]
        events = "".join(f"data: {json.dumps(p)}\n\n" for p in pieces) + "data: [DONE]\n\n"
        return httpx.Response(200, text=events, headers={"content-type": "text/event-stream"})

    assert run_probe(probe("n_stream"), fake_api(server)) == {"passed": True, "detail": ""}
    assert bodies[0]["n"] == 2


def test_vllms_server_is_started_as_a_user_serving_tools_starts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    import bench.peer

    seen: dict[str, Any] = {}

    @contextlib.contextmanager
    def vllm_server(
        settings: object, tier: Tier, concurrency: int, *, server_flags: tuple[str, ...] = ()
    ) -> Iterator[bench.peer.Endpoint]:
        seen["flags"] = server_flags
        yield bench.peer.Endpoint("http://vllm", "none", tier.value)

    monkeypatch.setattr(bench.peer, "vllm_server", vllm_server)
    with compat._server("vllm", Settings(), Tier.SMALL) as endpoint:
        assert endpoint == ("http://vllm", "none", "small")
    # Without a tool-call parser vLLM's server refuses even a named or required call.
    assert seen["flags"] == ("--enable-auto-tool-choice", "--tool-call-parser", "hermes")
