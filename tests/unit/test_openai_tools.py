"""Tools and tool_choice at the gateway: what a request offers becomes the job's tools and,
for a forced call, the constraint the engine takes; what the model answers becomes
``tool_calls``, whole or streamed as OpenAI sends them."""

from __future__ import annotations

import json
import threading
from typing import Any

import jsonschema
import pytest
from pydantic import ValidationError

from producer.batches.lines import parse_line
from producer.batches.views import output_line
from producer.gateway.protocol import chat as oai
from producer.gateway.protocol.chat import ChatCompletionRequest
from producer.gateway.protocol.common import JobAnswer
from producer.gateway.serving.chat import ToolStream
from schemas.events import Timings, Usage
from schemas.requests import GenerationRequest
from schemas.sampling import StructuredOutput
from schemas.tables import Job
from schemas.tools import ToolUse, may_become_call, plain_messages, stored_tool_use
from workers.engine.vllm import VllmEngine
from workers.job_input import tool_prompt_ids

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "The weather in a city",
        "parameters": {
            "type": "object",
            "properties": {"city": {"type": "string"}},
            "required": ["city"],
        },
    },
}
TIME = {"type": "function", "function": {"name": "get_time"}}
NAMED = {"type": "function", "function": {"name": "get_weather"}}
HI = [{"role": "user", "content": "Weather in Paris?"}]
BODY: dict[str, Any] = {"model": "auto", "messages": HI, "tools": [WEATHER, TIME]}


def body(**fields: Any) -> ChatCompletionRequest:
    return ChatCompletionRequest.model_validate({**BODY, **fields})


def use(choice: Any = "auto") -> ToolUse:
    return ToolUse.model_validate({"tools": [WEATHER, TIME], "choice": choice})


def refusal(fields: dict[str, Any]) -> str:
    with pytest.raises(ValidationError) as caught:
        ChatCompletionRequest.model_validate({**BODY, **fields})
    return " ".join(str(e["msg"]) for e in caught.value.errors())


# The request ---------------------------------------------------------------------


def test_a_named_choice_constrains_the_answer_to_the_functions_arguments() -> None:
    request = GenerationRequest.model_validate(body(tool_choice=NAMED).to_llmq())
    assert request.tool_choice is not None
    assert request.sampling is not None
    assert request.sampling.structured == StructuredOutput(
        kind="json_schema", json_schema=WEATHER["function"]["parameters"]
    )


@pytest.mark.parametrize("parallel", [None, True, False])
def test_required_constrains_the_answer_to_calls_of_the_tools(parallel: bool | None) -> None:
    request = GenerationRequest.model_validate(
        body(tool_choice="required", parallel_tool_calls=parallel).to_llmq()
    )
    assert request.sampling is not None and request.sampling.structured is not None
    schema = request.sampling.structured.json_schema
    assert schema is not None
    jsonschema.validate([{"name": "get_weather", "parameters": {"city": "Paris"}}], schema)
    jsonschema.validate([{"name": "get_time", "parameters": {}}], schema)
    two = [{"name": "get_time", "parameters": {}}, {"name": "get_time", "parameters": {}}]
    if parallel is False:
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(two, schema)
    else:
        jsonschema.validate(two, schema)
    for wrong in (
        [],
        [{"name": "get_weather", "parameters": {}}],  # city is required
        [{"name": "get_news", "parameters": {}}],
        {"name": "get_time", "parameters": {}},
    ):
        with pytest.raises(jsonschema.ValidationError):
            jsonschema.validate(wrong, schema)


def test_auto_reads_several_tagged_calls_or_the_first_without_parallel_calls() -> None:
    text = (
        '<tool_call>{"name": "get_time", "arguments": {"zone": "UTC"}}</tool_call>\n'
        '<tool_call>{"name": "get_weather", "arguments": {"city": "Oslo"}}</tool_call>'
    )
    several = body().tool_use()
    assert several is not None
    assert [c.function.name for c in several.parse(text, job_id="j").calls] == [
        "get_time",
        "get_weather",
    ]
    assert "one block per call" in several.instruction()
    one = body(parallel_tool_calls=False).tool_use()
    assert one is not None
    assert [c.function.name for c in one.parse(text, job_id="j").calls] == ["get_time"]
    assert "one block per call" not in one.instruction()


def test_a_function_without_parameters_takes_any_object() -> None:
    assert use({"type": "function", "function": {"name": "get_time"}}).forced_schema() == {
        "type": "object",
        "properties": {},
    }


def test_auto_and_none_add_no_constraint() -> None:
    auto = body().to_llmq()
    assert auto["tools"] == [WEATHER, TIME]
    assert "tool_choice" not in auto and "sampling" not in auto
    # none: the model is not told of the tools, as if there were none.
    assert body(tool_choice="none").to_llmq() == body(tools=[]).to_llmq()
    assert "tools" not in body(tools=[]).to_llmq()


@pytest.mark.parametrize("parallel", [True, False, None])
def test_parallel_tool_calls_is_accepted_either_way(parallel: bool | None) -> None:
    request = body(tool_choice="required", parallel_tool_calls=parallel).to_llmq()
    assert GenerationRequest.model_validate(request).tool_choice == "required"


@pytest.mark.parametrize(
    ("fields", "expected"),
    [
        ({"tools": [], "tool_choice": "required"}, "tool_choice needs tools"),
        (
            {"tool_choice": {"type": "function", "function": {"name": "get_news"}}},
            "'get_news', which is not among the tools",
        ),
        ({"tools": [WEATHER, WEATHER]}, "distinct function names"),
        (
            {"tool_choice": "required", "response_format": {"type": "json_object"}},
            "send no response_format or structured_outputs",
        ),
        ({"tools": [{"type": "function", "function": {"name": "a b"}}]}, "pattern"),
        ({"tools": [{"type": "code_interpreter"}]}, "function"),
    ],
)
def test_tools_that_cannot_be_served_are_refused_saying_why(
    fields: dict[str, Any], expected: str
) -> None:
    assert expected in refusal(fields)


def test_a_stored_request_with_another_constraint_and_a_forced_call_is_invalid() -> None:
    request = {
        **body(tool_choice="required").to_llmq(),
        "sampling": {"structured": {"kind": "json_object"}},
    }
    with pytest.raises(ValidationError, match="forces a call takes no other structured"):
        GenerationRequest.model_validate(request)


def test_the_stored_form_validates_to_itself_and_a_request_without_tools_is_unchanged() -> None:
    request = GenerationRequest.model_validate(body(tool_choice=NAMED).to_llmq())
    assert GenerationRequest.model_validate(request.model_dump(mode="json")) == request
    plain = GenerationRequest.from_text("hi").model_dump(mode="json")
    assert set(plain) == {
        "messages",
        "system_prompt",
        "max_tokens",
        "temperature",
        "top_p",
        "stop",
        "seed",
        "conversation_id",
        "metadata",
    }


def test_tool_turns_in_the_history_are_accepted() -> None:
    call = {
        "id": "call_1",
        "type": "function",
        "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
    }
    history = [
        *HI,
        {"role": "assistant", "content": None, "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "call_1", "name": "get_weather", "content": "18 C"},
    ]
    request = GenerationRequest.model_validate(body(messages=history).to_llmq())
    assert request.messages[1].tool_calls is not None
    assert request.messages[1].content == ""
    assert request.messages[2].tool_call_id == "call_1"


@pytest.mark.parametrize(
    "message",
    [
        {"role": "user", "content": "x", "tool_call_id": "c"},
        {"role": "tool", "content": "18 C"},  # answers no call
        {"role": "assistant", "content": ""},  # neither text nor calls
    ],
)
def test_tool_fields_on_the_wrong_turn_are_refused(message: dict[str, Any]) -> None:
    with pytest.raises(ValidationError):
        GenerationRequest.model_validate(body(messages=[*HI, message]).to_llmq())


def test_a_batch_line_carries_the_tools() -> None:
    line = json.dumps(
        {
            "custom_id": "a",
            "method": "POST",
            "url": "/v1/chat/completions",
            "body": {**BODY, "model": "small", "tool_choice": "required"},
        }
    )
    parsed = parse_line(line)
    assert parsed.request["tool_choice"] == "required"
    assert stored_tool_use(parsed.request) == use("required")


# What the model is told ----------------------------------------------------------------


def test_tools_calls_and_results_are_written_out_for_a_template_without_tools() -> None:
    call = {"id": "c", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
    messages = [
        {"role": "system", "content": "Be brief."},
        *HI,
        {"role": "assistant", "content": "", "tool_calls": [call]},
        {"role": "tool", "tool_call_id": "c", "content": "18 C"},
    ]
    plain = plain_messages(messages, use())
    assert [m["role"] for m in plain] == ["system", "user", "assistant", "user"]
    assert plain[0]["content"].startswith("Be brief.\n\nYou have these tools")
    assert '"name": "get_weather"' in plain[0]["content"]
    assert "<tool_call>" in plain[0]["content"]  # auto: the form to answer a call in
    assert plain[2]["content"] == (
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris"}}\n</tool_call>'
    )
    assert plain[3]["content"] == "<tool_response>\n18 C\n</tool_response>"
    assert all(set(m) == {"role", "content"} for m in plain)


def test_the_instruction_describes_the_form_the_choice_forces() -> None:
    assert "Call the tool get_weather" in use(NAMED).instruction()
    assert '"parameters"' in use("required").instruction()
    assert plain_messages(HI, use())[0]["role"] == "system"


# What the model answers ----------------------------------------------------------------


def test_a_named_answer_is_the_calls_arguments() -> None:
    answer = use(NAMED).parse(' {"city": "Paris"}', job_id="j1")
    assert answer.content is None
    [call] = answer.calls
    assert call.id == "call_j1"
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Paris"}


def test_a_required_answer_is_its_arrays_calls() -> None:
    text = '[{"name": "get_weather", "parameters": {"city": "Oslo"}}]'
    [call] = use("required").parse(text, job_id="j").calls
    assert call.function.name == "get_weather"
    assert json.loads(call.function.arguments) == {"city": "Oslo"}
    cut = use("required").parse('[{"name": "get_weather", "par', job_id="j")
    assert (cut.content, cut.calls) == ('[{"name": "get_weather", "par', ())


@pytest.mark.parametrize(
    "text",
    [
        '<tool_call>\n{"name": "get_weather", "arguments": {"city": "Rome"}}\n</tool_call>',
        '{"name": "get_weather", "arguments": {"city": "Rome"}}',
        '```json\n{"name": "get_weather", "parameters": {"city": "Rome"}}\n```',
        '{"name": "get_weather", "arguments": "{\\"city\\": \\"Rome\\"}"}',
    ],
)
def test_an_auto_answer_that_calls_a_tool_is_read_as_the_call(text: str) -> None:
    [call] = use().parse(text, job_id="j").calls
    assert json.loads(call.function.arguments) == {"city": "Rome"}


@pytest.mark.parametrize(
    "text",
    [
        "It is sunny in Rome.",
        '{"name": "get_news", "arguments": {}}',  # not one of the tools
        '{"city": "Rome"}',
        "<tool_call>not json</tool_call>",
    ],
)
def test_an_auto_answer_that_calls_nothing_is_text(text: str) -> None:
    answer = use().parse(text, job_id="j")
    assert (answer.content, answer.calls) == (text, ())


def test_a_completion_with_calls_has_tool_calls_null_content_and_finishes_with_them() -> None:
    made = completion(text='{"city": "Paris"}', tool_use=use(NAMED))
    choice = made["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"] == {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {
                "id": "call_j",
                "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
            }
        ],
    }
    cut = completion(text='{"ci', tool_use=use(NAMED), finish_reason="length")
    assert cut["choices"][0]["finish_reason"] == "length"
    text = completion(text="Sunny.", tool_use=use())["choices"][0]
    assert (text["message"], text["finish_reason"]) == (
        {"role": "assistant", "content": "Sunny."},
        "stop",
    )


def completion(*, text: str, tool_use: ToolUse, finish_reason: str = "stop") -> dict[str, Any]:
    answer = JobAnswer(
        job_id="j",
        model="auto",
        text=text,
        finish_reason=finish_reason,
        usage=Usage(prompt_tokens=1, completion_tokens=1),
        timings=Timings(queue_wait_ms=0.0, ttft_ms=1.0, total_ms=1.0),
        tier="small",
    )
    return oai.completion(answer, tool_use=tool_use)


# Streamed ----------------------------------------------------------------------------


def streamed(stream: ToolStream, tokens: list[str]) -> tuple[list[dict[str, Any]], str]:
    deltas = [d for d in (stream.on_token(t) for t in tokens) if d is not None]
    rest, reason = stream.on_final("".join(tokens), "stop")
    return [*deltas, *([rest] if rest is not None else [])], reason


def test_a_named_call_streams_its_announcement_then_argument_fragments() -> None:
    deltas, reason = streamed(ToolStream(use(NAMED), "j", resumed=False), ['{"city"', ': "Oslo"}'])
    assert reason == "tool_calls"
    assert deltas == [
        {
            "content": None,
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_j",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city"'},
                }
            ],
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": ': "Oslo"}'}}]},
    ]
    # Resumed after the announcement: fragments only.
    resumed, _ = streamed(ToolStream(use(NAMED), "j", resumed=True), ["}"])
    assert resumed == [{"tool_calls": [{"index": 0, "function": {"arguments": "}"}}]}]


def test_a_required_call_goes_out_whole_at_the_end() -> None:
    tokens = ['[{"name": "get_time",', ' "parameters": {}}]']
    deltas, reason = streamed(ToolStream(use("required"), "j", resumed=False), tokens)
    assert reason == "tool_calls"
    assert deltas == [
        {
            "content": None,
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_j",
                    "type": "function",
                    "function": {"name": "get_time", "arguments": "{}"},
                }
            ],
        }
    ]


def test_an_auto_answer_streams_as_text_once_it_cannot_be_a_call() -> None:
    deltas, reason = streamed(ToolStream(use(), "j", resumed=False), [" ", "It", " is", " sunny"])
    assert reason == "stop"
    assert deltas == [{"content": " It"}, {"content": " is"}, {"content": " sunny"}]
    tokens = ["<tool", '_call>{"name": "get_time", "arguments": {}}</tool_call>']
    deltas, reason = streamed(ToolStream(use(), "j", resumed=False), tokens)
    assert reason == "tool_calls"
    assert [d["tool_calls"][0]["function"]["name"] for d in deltas] == ["get_time"]
    # Held, and it was text after all: the text at the end.
    deltas, reason = streamed(ToolStream(use(), "j", resumed=False), ['{"a":', " 1}"])
    assert (deltas, reason) == ([{"content": '{"a": 1}'}], "stop")


@pytest.mark.parametrize(
    ("start", "held"),
    [
        ("", True),
        ("  <tool", True),
        ("<tool_call>{", True),
        ("{", True),
        ("`", True),
        ("Hi", False),
        ("<b>", False),
    ],
)
def test_what_may_become_a_call(start: str, held: bool) -> None:
    assert may_become_call(start) is held


def test_a_batch_output_line_carries_the_calls() -> None:
    request = body(model="small", tool_choice=NAMED).to_llmq()
    job = Job(id="j", tier="small", request=request, output_text='{"city": "Oslo"}')
    job.finish_reason = "stop"
    choice = json.loads(output_line(job))["response"]["body"]["choices"][0]
    assert choice["finish_reason"] == "tool_calls"
    assert choice["message"]["tool_calls"][0]["function"] == {
        "name": "get_weather",
        "arguments": '{"city": "Oslo"}',
    }


# The chat template's own tools section ---------------------------------------------------


class RecordingTokenizer:
    def __init__(self, template: str) -> None:
        self.chat_template = template
        self.calls: list[dict[str, Any]] = []

    def apply_chat_template(self, messages: Any, **options: Any) -> dict[str, list[int]]:
        self.calls.append({"messages": messages, **options})
        return {"input_ids": [7, 8]}


def engine_with(template: str) -> tuple[VllmEngine, RecordingTokenizer]:
    engine = VllmEngine.__new__(VllmEngine)
    tokenizer = RecordingTokenizer(template)
    engine._tokenizer = tokenizer
    engine._tokenizer_lock = threading.Lock()
    return engine, tokenizer


def test_a_template_with_a_tools_section_renders_the_tools_itself() -> None:
    engine, tokenizer = engine_with("{% if tools %}{{ tools | tojson }}{% endif %}...")
    call = {"id": "c", "type": "function", "function": {"name": "get_time", "arguments": "{}"}}
    messages = [*HI, {"role": "assistant", "content": "", "tool_calls": [call]}]
    assert tool_prompt_ids(messages, use(), engine) == [7, 8]
    [rendered] = tokenizer.calls
    assert rendered["tools"] == [WEATHER, TIME]
    # The arguments as an object, as vLLM hands them to templates.
    assert rendered["messages"][1]["tool_calls"][0]["function"]["arguments"] == {}
    assert rendered["add_generation_prompt"] is True


def test_a_template_without_tools_gets_them_written_out() -> None:
    engine, tokenizer = engine_with("{% for m in messages %}{{ m['content'] }}{% endfor %}")
    assert engine.render_chat_with_tools(HI, [WEATHER]) is None
    assert tokenizer.calls == []
    rendered: list[Any] = []

    class Plain:
        def render_chat_with_tools(self, *_: object) -> None:
            return None

        def render_chat(self, messages: Any) -> list[int]:
            rendered.append(messages)
            return [1]

    assert tool_prompt_ids(list(HI), use(), Plain()) == [1]  # type: ignore[arg-type]
    assert rendered[0][0]["content"].startswith("You have these tools")
