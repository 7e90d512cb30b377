"""The agent loop against a scripted model, a fake tool host and an in-memory recorder."""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any, ClassVar

import pytest

from conversations.loop.agent import AgentOutcome, AgentTurn, ToolRun, check_call, run_agent
from conversations.loop.llm import (
    PROVIDER_NAME_LIMIT,
    Message,
    ToolCall,
    ToolChoice,
    ToolDef,
    provider_tool_names,
    tool_result_text,
)
from conversations.loop.paradigms.native import NativeParadigm
from conversations.loop.providers.base import ModelReply, ModelRequest, ProviderError
from conversations.loop.providers.streaming import DeltaCallback, PartialCall, PartialReply
from conversations.loop.splicing import Spliced, TokenReport
from conversations.loop.wire import WireExchange
from conversations.typealias import JSONDict

WEATHER = ToolDef(
    server_id=1,
    server_name="demo",
    name="get_weather_forecast",
    provider_name="demo__get_weather_forecast",
    description="A made-up forecast.",
    input_schema={
        "type": "object",
        "properties": {"city": {"type": "string"}, "day": {"type": "string"}},
        "required": ["city"],
    },
)
CALCULATE = ToolDef(
    server_id=1,
    server_name="demo",
    name="calculate",
    provider_name="demo__calculate",
    description="Arithmetic.",
    input_schema={
        "type": "object",
        "properties": {"expression": {"type": "string"}},
        "required": ["expression"],
    },
)
TOOLS = [WEATHER, CALCULATE]
OFFERED = {tool.provider_name: tool for tool in TOOLS}
FORECAST: JSONDict = {
    "content": [{"type": "text", "text": "Paris today: sunny, 12–18 °C."}],
    "structuredContent": {"city": "Paris", "condition": "sunny"},
    "isError": False,
}


# --- fakes ---------------------------------------------------------------------------------


def render(request: ModelRequest) -> Spliced:
    """A stand-in splicer: the loop only stores what it returns."""
    text = "\n".join(f"{m.role}: {m.content}" for m in request.messages)
    return Spliced(
        text=text, exact=True, source="test", tokens=TokenReport(None, None, {}, [], "not counted")
    )


def exchange(label: str = "POST /v1/chat/completions") -> WireExchange:
    return WireExchange(
        channel="llm",
        label=label,
        started_at=datetime.now(UTC),
        request_body="{}",
        response_body="{}",
        status="200",
    )


def reply(text: str | None = None, *calls: ToolCall, finish_reason: str = "") -> ModelReply:
    return ModelReply(
        text=text,
        tool_calls=list(calls),
        finish_reason=finish_reason or ("tool_calls" if calls else "stop"),
        exchange=exchange(),
    )


def call(call_id: str, name: str, arguments_text: str) -> ToolCall:
    return ToolCall(id=call_id, name=name, arguments_text=arguments_text)


@dataclass
class ScriptedProvider:
    """Answers each request with the next scripted reply (or raises the scripted error)."""

    script: list[ModelReply | ProviderError]
    requests: list[ModelRequest] = field(default_factory=list)
    # Each call streams this partial reply to its on_delta, if it was given one.
    streams: PartialReply | None = None
    key: ClassVar[str] = "scripted"
    label: ClassVar[str] = "scripted"

    def complete(self, request: ModelRequest, *, on_delta: DeltaCallback | None = None) -> ModelReply:
        self.requests.append(request)
        if on_delta is not None and self.streams is not None:
            on_delta(self.streams)
        if not self.script:
            raise AssertionError("the loop asked the model more often than the script allows")
        item = self.script.pop(0)
        if isinstance(item, ProviderError):
            raise item
        return item


@dataclass
class FakeHost:
    """Runs tools by name from a table of handlers and remembers every call it received."""

    handlers: dict[str, Callable[[JSONDict], ToolRun]] = field(default_factory=dict)
    calls: list[tuple[str, JSONDict]] = field(default_factory=list)

    def call(self, tool: ToolDef, arguments: JSONDict, *, call_id: str | None = None) -> ToolRun:
        self.calls.append((tool.name, arguments))
        return self.handlers[tool.name](arguments)


@dataclass
class MemoryRecorder:
    """Keeps every step as a dict, in the order the loop opened them."""

    steps: list[dict[str, Any]] = field(default_factory=list)

    def step_open(
        self,
        *,
        kind: str,
        title: str,
        parent: int | None = None,
        computed: Callable[[], dict[str, Any]] | None = None,
        **fields: Any,
    ) -> int:
        if computed is not None:
            fields.update(computed())
        self.steps.append(
            {"kind": kind, "title": title, "parent": parent, "status": "open", "exchanges": [], **fields}
        )
        return len(self.steps) - 1

    def step_save(self, step: int, *, exchanges: Sequence[WireExchange] = (), **fields: Any) -> None:
        self.steps[step].update(fields)
        self.steps[step]["exchanges"].extend(exchanges)

    def step_close(
        self, step: int, *, status: str, exchanges: Sequence[WireExchange] = (), **fields: Any
    ) -> None:
        self.step_save(step, exchanges=exchanges, **fields)
        self.steps[step]["status"] = status

    def kinds(self) -> list[str]:
        return [step["kind"] for step in self.steps]


def ok(result: JSONDict) -> Callable[[JSONDict], ToolRun]:
    return lambda arguments: ToolRun(result=result)


def text_result(text: str) -> JSONDict:
    return {"content": [{"type": "text", "text": text}], "isError": False}


@dataclass
class Run:
    outcome: AgentOutcome
    provider: ScriptedProvider
    host: FakeHost
    recorder: MemoryRecorder


def run(
    *script: ModelReply | ProviderError,
    host: FakeHost | None = None,
    choice: ToolChoice | None = None,
    max_steps: int = 8,
    history: list[Message] | None = None,
) -> Run:
    provider = ScriptedProvider(list(script))
    host = host or FakeHost({"get_weather_forecast": ok(FORECAST), "calculate": ok(text_result("42"))})
    recorder = MemoryRecorder()
    turn = AgentTurn(
        question="What is the weather in Paris?",
        tools=TOOLS,
        history=history or [],
        choice=choice or ToolChoice(),
        max_steps=max_steps,
    )
    outcome = run_agent(
        turn, paradigm=NativeParadigm(), provider=provider, host=host, recorder=recorder, render=render
    )
    return Run(outcome, provider, host, recorder)


def test_each_model_call_streams_to_the_place_its_own_step_gives() -> None:
    partial = PartialReply(calls=(PartialCall(0, "call_1", "demo__get_weather_forecast", '{"ci'),))
    provider = ScriptedProvider(
        [reply(None, call("call_1", "demo__get_weather_forecast", '{"city": "Paris"}')), reply("Sunny.")],
        streams=partial,
    )
    recorder = MemoryRecorder()
    shown: list[tuple[int, PartialReply]] = []

    def partials(step: int) -> DeltaCallback:
        return lambda seen: shown.append((step, seen))

    outcome = run_agent(
        AgentTurn(question="What is the weather in Paris?", tools=TOOLS),
        paradigm=NativeParadigm(),
        provider=provider,
        host=FakeHost({"get_weather_forecast": ok(FORECAST)}),
        recorder=recorder,
        render=render,
        partials=partials,
    )

    assert outcome.status == "done"
    decide, answer = (index for index, step in enumerate(recorder.steps) if step["kind"] != "tool")
    assert shown == [(decide, partial), (answer, partial)]


def tool_messages(request: ModelRequest) -> list[Message]:
    return [message for message in request.messages if message.role == "tool"]


# --- the loop ------------------------------------------------------------------------------


def test_a_call_then_an_answer_records_decide_tool_answer_and_finishes_done() -> None:
    first = reply(None, call("call_1", "demo__get_weather_forecast", '{"city": "Paris"}'))
    second = reply("It is sunny in Paris (demo data).")

    done = run(first, second)

    assert done.outcome.status == "done"
    assert done.outcome.answer == "It is sunny in Paris (demo data)."
    assert done.outcome.error == ""
    assert done.recorder.kinds() == ["decide", "tool", "answer"]
    decide, tool, answer = done.recorder.steps
    assert decide["status"] == "ok"
    assert decide["title"] == "calls get_weather_forecast"
    assert decide["exchanges"] == [first.exchange]
    assert decide["calls"] == [
        {
            "id": "call_1",
            "name": "demo__get_weather_forecast",
            "arguments_text": '{"city": "Paris"}',
            "arguments": {"city": "Paris"},
            "valid": True,
            "error": "",
            "server": "demo",
            "tool": "get_weather_forecast",
        }
    ]
    assert tool["parent"] == 0
    assert tool["title"] == "demo/get_weather_forecast"
    assert tool["tool_name"] == "get_weather_forecast"
    assert tool["arguments"] == {"city": "Paris"}
    assert tool["server_id"] == 1
    assert tool["status"] == "ok"
    assert tool["is_error"] is False
    assert tool["result"] == FORECAST
    assert answer["status"] == "ok"
    assert answer["text"] == "It is sunny in Paris (demo data)."
    assert answer["exchanges"] == [second.exchange]
    assert done.host.calls == [("get_weather_forecast", {"city": "Paris"})]


def test_the_tool_result_reaches_the_next_request_as_a_tool_message_with_the_same_call_id() -> None:
    done = run(
        reply(None, call("call_1", "demo__get_weather_forecast", '{"city": "Paris"}')), reply("Sunny.")
    )

    first, second = done.provider.requests
    assert [message.role for message in first.messages] == ["user"]
    assert [message.role for message in second.messages] == ["user", "assistant", "tool"]
    assistant, result = second.messages[1], second.messages[2]
    assert [c.id for c in assistant.tool_calls] == ["call_1"]
    assert result.tool_call_id == "call_1"
    assert result.content == "Paris today: sunny, 12–18 °C."
    assert result.is_error is False
    assert done.outcome.messages[-1] == Message(role="assistant", content="Sunny.")


def test_history_comes_before_the_question_in_the_first_request() -> None:
    history = [Message(role="user", content="Hi"), Message(role="assistant", content="Hello!")]

    done = run(reply("Sunny."), history=history)

    assert [(m.role, m.content) for m in done.provider.requests[0].messages] == [
        ("user", "Hi"),
        ("assistant", "Hello!"),
        ("user", "What is the weather in Paris?"),
    ]


def test_an_unknown_tool_is_not_sent_and_the_model_repairs_its_call() -> None:
    wrong = reply(None, call("call_1", "weather", '{"city": "Paris"}'))
    repaired = reply(None, call("call_2", "demo__get_weather_forecast", '{"city": "Paris"}'))

    done = run(wrong, repaired, reply("Sunny."))

    expected_error = (
        "unknown tool 'weather'; the tools offered are: demo__calculate, demo__get_weather_forecast"
    )
    assert done.outcome.status == "done"
    assert done.recorder.kinds() == ["decide", "tool", "decide", "tool", "answer"]
    refused = done.recorder.steps[1]
    assert done.recorder.steps[0]["status"] == "error"
    assert done.recorder.steps[0]["calls"][0]["valid"] is False
    assert done.recorder.steps[0]["calls"][0]["server"] is None
    assert refused["status"] == "error"
    assert refused["is_error"] is True
    assert refused["tool_name"] == "weather"
    assert refused["server_id"] is None
    assert refused["error"] == f"not sent: {expected_error}"
    assert done.host.calls == [("get_weather_forecast", {"city": "Paris"})]
    [error_message] = tool_messages(done.provider.requests[1])
    assert error_message.tool_call_id == "call_1"
    assert error_message.content == f"Error: {expected_error}"
    assert error_message.is_error is True
    assert done.recorder.steps[3]["status"] == "ok"


def test_arguments_that_are_not_json_are_not_sent_and_the_model_is_told_why() -> None:
    broken = reply(None, call("call_1", "demo__get_weather_forecast", '{"city": "Paris"'))

    done = run(broken, reply("Sorry."))

    expected_error = (
        'the arguments for demo__get_weather_forecast are not a JSON object: \'{"city": "Paris"\''
    )
    decide, tool, _answer = done.recorder.steps
    assert done.host.calls == []
    assert tool["error"] == f"not sent: {expected_error}"
    assert tool["arguments"] == '{"city": "Paris"'
    assert decide["calls"][0]["arguments"] is None
    assert any("arguments are not valid JSON" in d for d in decide["diagnostics"])
    [error_message] = tool_messages(done.provider.requests[1])
    assert error_message.content == f"Error: {expected_error}"


def test_arguments_that_are_json_but_not_an_object_are_refused() -> None:
    done = run(reply(None, call("call_1", "demo__calculate", '["1 + 1"]')), reply("Sorry."))

    assert done.host.calls == []
    assert done.recorder.steps[1]["error"] == (
        "not sent: the arguments for demo__calculate are not a JSON object: '[\"1 + 1\"]'"
    )
    assert (
        "demo__calculate: arguments are JSON but not an object (list)"
        in done.recorder.steps[0]["diagnostics"]
    )


@pytest.mark.parametrize(
    ("arguments_text", "expected_error"),
    [
        ("{}", "invalid arguments for demo__get_weather_forecast: 'city' is a required property"),
        (
            '{"city": 42}',
            "invalid arguments for demo__get_weather_forecast: at 'city': 42 is not of type 'string'",
        ),
        (
            '{"day": 3}',
            "invalid arguments for demo__get_weather_forecast: 'city' is a required property; "
            "at 'day': 3 is not of type 'string'",
        ),
    ],
)
def test_arguments_violating_the_schema_are_refused_with_the_validator_message(
    arguments_text: str, expected_error: str
) -> None:
    done = run(reply(None, call("call_1", "demo__get_weather_forecast", arguments_text)), reply("Sorry."))

    assert done.host.calls == []
    assert done.recorder.steps[0]["calls"][0]["error"] == expected_error
    assert done.recorder.steps[1]["error"] == f"not sent: {expected_error}"
    [error_message] = tool_messages(done.provider.requests[1])
    assert error_message.content == f"Error: {expected_error}"
    assert error_message.is_error is True


def test_a_tool_host_error_goes_back_to_the_model_and_the_turn_continues() -> None:
    captured = exchange("tools/call")
    host = FakeHost({"get_weather_forecast": lambda arguments: ToolRun(None, "timed out", [captured])})

    done = run(
        reply(None, call("call_1", "demo__get_weather_forecast", '{"city": "Paris"}')),
        reply("No data."),
        host=host,
    )

    assert done.outcome.status == "done"
    assert done.outcome.answer == "No data."
    tool = done.recorder.steps[1]
    assert tool["status"] == "error"
    assert tool["is_error"] is True
    assert tool["error"] == "timed out"
    assert tool["exchanges"] == [captured]
    assert done.recorder.steps[0]["status"] == "ok"
    [error_message] = tool_messages(done.provider.requests[1])
    assert error_message.content == "Error: timed out"
    assert error_message.is_error is True


def test_a_tool_result_flagged_is_error_is_recorded_as_an_error_and_its_text_goes_back() -> None:
    failed: JSONDict = {"content": [{"type": "text", "text": "Unknown day 'soon'."}], "isError": True}
    host = FakeHost({"get_weather_forecast": ok(failed)})

    done = run(
        reply(None, call("c", "demo__get_weather_forecast", '{"city": "Paris"}')), reply("Hm."), host=host
    )

    assert done.recorder.steps[1]["status"] == "error"
    assert done.recorder.steps[1]["is_error"] is True
    assert done.recorder.steps[1]["result"] == failed
    [error_message] = tool_messages(done.provider.requests[1])
    assert error_message.content == "Unknown day 'soon'."
    assert error_message.is_error is True


def test_a_provider_error_becomes_an_error_step_with_its_exchange_and_fails_the_turn() -> None:
    first = reply(None, call("call_1", "demo__get_weather_forecast", '{"city": "Paris"}'))
    failed_exchange = exchange()
    failed_exchange.status = "500"
    error = ProviderError("the model endpoint answered 500: overloaded", exchange=failed_exchange, status=500)

    done = run(first, error)

    assert done.outcome.status == "failed"
    assert done.outcome.error == "the model endpoint answered 500: overloaded"
    assert done.outcome.answer == ""
    assert done.recorder.kinds() == ["decide", "tool", "error"]
    decide, tool, failed = done.recorder.steps
    assert decide["exchanges"] == [first.exchange]
    assert decide["status"] == "ok"
    assert tool["result"] == FORECAST
    assert failed["status"] == "error"
    assert failed["title"] == "model call failed"
    assert failed["error"] == "the model endpoint answered 500: overloaded"
    assert failed["exchanges"] == [failed_exchange]
    assert [m.role for m in done.outcome.messages] == ["user", "assistant", "tool"]


def test_a_provider_error_without_an_exchange_records_none() -> None:
    done = run(ProviderError("the model endpoint could not be reached"))

    assert done.outcome.status == "failed"
    assert done.recorder.kinds() == ["error"]
    assert done.recorder.steps[0]["exchanges"] == []


def test_the_step_limit_ends_the_turn_failed_with_an_error_step() -> None:
    looping = [reply(None, call(f"call_{n}", "demo__calculate", '{"expression": "1 + 1"}')) for n in range(2)]

    done = run(*looping, max_steps=2)

    assert done.outcome.status == "failed"
    assert done.outcome.error == "stopped after 2 decisions without a final answer"
    assert len(done.provider.requests) == 2
    assert done.recorder.kinds() == ["decide", "tool", "decide", "tool", "error"]
    limit = done.recorder.steps[-1]
    assert limit["title"] == "step limit reached"
    assert limit["status"] == "error"
    assert limit["error"] == "stopped after 2 decisions without a final answer"
    assert limit["parent"] is None


@pytest.mark.parametrize(
    "forced",
    [ToolChoice("required"), ToolChoice("named", name="demo__calculate")],
    ids=["required", "named"],
)
def test_a_forced_tool_choice_applies_to_the_first_decision_only(forced: ToolChoice) -> None:
    done = run(
        reply(None, call("c1", "demo__calculate", '{"expression": "6 * 7"}')),
        reply(None, call("c2", "demo__calculate", '{"expression": "1 + 1"}')),
        reply("42"),
        choice=forced,
    )

    assert [request.tool_choice for request in done.provider.requests] == [
        forced,
        ToolChoice("auto"),
        ToolChoice("auto"),
    ]


@pytest.mark.parametrize("mode", ["auto", "none"])
def test_an_unforced_tool_choice_is_kept_for_every_decision(mode: str) -> None:
    choice = ToolChoice(mode)  # type: ignore[arg-type]
    done = run(reply(None, call("c1", "demo__calculate", '{"expression": "1"}')), reply("1"), choice=choice)

    assert [request.tool_choice for request in done.provider.requests] == [choice, choice]


def test_parallel_calls_in_one_reply_are_each_run_in_order() -> None:
    both = reply(
        None,
        call("call_a", "demo__get_weather_forecast", '{"city": "Paris"}'),
        call("call_b", "demo__calculate", '{"expression": "6 * 7"}'),
    )

    done = run(both, reply("Sunny, and 42."))

    assert done.host.calls == [
        ("get_weather_forecast", {"city": "Paris"}),
        ("calculate", {"expression": "6 * 7"}),
    ]
    assert done.recorder.kinds() == ["decide", "tool", "tool", "answer"]
    assert done.recorder.steps[0]["title"] == "calls get_weather_forecast, calculate"
    assert [step["parent"] for step in done.recorder.steps[1:3]] == [0, 0]
    assert [(m.tool_call_id, m.content) for m in tool_messages(done.provider.requests[1])] == [
        ("call_a", "Paris today: sunny, 12–18 °C."),
        ("call_b", "42"),
    ]


def test_one_bad_call_among_parallel_calls_does_not_stop_the_good_one() -> None:
    mixed = reply(
        None,
        call("call_a", "demo__nope", "{}"),
        call("call_b", "demo__calculate", '{"expression": "6 * 7"}'),
    )

    done = run(mixed, reply("42."))

    assert done.host.calls == [("calculate", {"expression": "6 * 7"})]
    assert [step["status"] for step in done.recorder.steps[:3]] == ["error", "error", "ok"]
    assert [m.is_error for m in tool_messages(done.provider.requests[1])] == [True, False]


def test_an_empty_reply_is_an_answer_with_a_diagnostic() -> None:
    done = run(reply(None))

    assert done.outcome.status == "done"
    assert done.outcome.answer == ""
    [answer] = done.recorder.steps
    assert answer["kind"] == "answer"
    assert answer["text"] == ""
    assert "the model returned neither text nor a tool call" in answer["diagnostics"]


def test_finish_reason_tool_calls_without_a_call_is_diagnosed() -> None:
    done = run(reply("Let me check.", finish_reason="tool_calls"))

    assert done.outcome.answer == "Let me check."
    assert done.recorder.steps[0]["diagnostics"] == [
        "finish_reason is 'tool_calls' but the message carries no tool call"
    ]


# --- check_call ----------------------------------------------------------------------------


def test_check_call_accepts_valid_arguments() -> None:
    checked = check_call(
        ToolCall("c", "demo__get_weather_forecast", "", {"city": "Paris", "day": "today"}), OFFERED
    )

    assert checked.tool is WEATHER
    assert checked.error == ""
    assert checked.as_json()["valid"] is True


def test_check_call_names_the_offered_tools_for_an_unknown_one() -> None:
    checked = check_call(ToolCall("c", "calc", "{}", {}), OFFERED)

    assert checked.tool is None
    assert (
        checked.error
        == "unknown tool 'calc'; the tools offered are: demo__calculate, demo__get_weather_forecast"
    )


def test_check_call_says_none_are_offered_when_there_are_no_tools() -> None:
    assert (
        check_call(ToolCall("c", "calc", "{}", {}), {}).error
        == "unknown tool 'calc'; the tools offered are: none"
    )


def test_check_call_reports_a_nested_path() -> None:
    nested = ToolDef(
        server_id=2,
        server_name="s",
        name="t",
        provider_name="s__t",
        description="",
        input_schema={
            "type": "object",
            "properties": {"where": {"type": "object", "properties": {"lat": {"type": "number"}}}},
        },
    )

    checked = check_call(ToolCall("c", "s__t", "", {"where": {"lat": "north"}}), {"s__t": nested})

    assert checked.error == "invalid arguments for s__t: at 'where.lat': 'north' is not of type 'number'"


# A server's inputSchema is untrusted input: a typo in it must not crash the loop.
MISTYPED = ToolDef(
    server_id=2,
    server_name="s",
    name="t",
    provider_name="s__t",
    description="",
    input_schema={"type": "object", "properties": {"x": {"type": "strng"}}},
)


def test_check_call_reports_an_invalid_input_schema() -> None:
    checked = check_call(ToolCall("c", "s__t", '{"x": 1}', {"x": 1}), {"s__t": MISTYPED})

    assert checked.tool is MISTYPED
    assert checked.error.startswith("the tool's inputSchema is not valid JSON Schema: ")


def test_a_tool_with_an_invalid_input_schema_is_refused_without_ending_the_turn() -> None:
    provider = ScriptedProvider([reply(None, call("c", "s__t", '{"x": 1}')), reply("Could not use it.")])
    host = FakeHost({"t": ok(text_result("unused"))})
    recorder = MemoryRecorder()
    turn = AgentTurn(question="Use t.", tools=[MISTYPED])

    outcome = run_agent(
        turn, paradigm=NativeParadigm(), provider=provider, host=host, recorder=recorder, render=render
    )

    assert outcome.status == "done"
    assert host.calls == []
    assert recorder.steps[1]["error"].startswith(
        "not sent: the tool's inputSchema is not valid JSON Schema: "
    )


def test_check_call_cuts_unparseable_arguments_in_its_message() -> None:
    long_text = "x" * 1000

    checked = check_call(ToolCall("c", "demo__calculate", long_text, None), OFFERED)

    assert checked.error == f"the arguments for demo__calculate are not a JSON object: {'x' * 300!r}"


# --- provider_tool_names -------------------------------------------------------------------

SAFE_NAME = re.compile(r"^[A-Za-z0-9_-]+$")
HASH_SUFFIX = re.compile(r"_[0-9a-f]{8}$")


def test_provider_names_join_server_and_tool_and_replace_dots_and_spaces() -> None:
    assert provider_tool_names([("demo server", "weather.get"), ("time", "get_current_time")]) == [
        "demo_server__weather_get",
        "time__get_current_time",
    ]


def test_provider_names_stay_unique_when_sanitising_makes_them_collide() -> None:
    names = provider_tool_names([("a.b", "c"), ("a b", "c"), ("a-b", "c")])

    assert names[0] == "a_b__c"
    assert names[2] == "a-b__c"
    assert names[1] != names[0]
    assert names[1].startswith("a_b__c_")
    assert HASH_SUFFIX.search(names[1])


def test_provider_names_stay_unique_for_repeated_pairs() -> None:
    names = provider_tool_names([("s", "t")] * 3)

    assert len(set(names)) == 3
    assert all(SAFE_NAME.match(name) for name in names)


def test_provider_names_are_cut_to_the_limit_with_a_hash_suffix() -> None:
    long_tool = "t" * 100
    names = provider_tool_names([("server", long_tool), ("server", long_tool + "2")])

    assert all(len(name) == PROVIDER_NAME_LIMIT for name in names)
    assert all(SAFE_NAME.match(name) and HASH_SUFFIX.search(name) for name in names)
    assert names[0] != names[1]
    assert names[0][:-9] == names[1][:-9]


def test_a_name_exactly_at_the_limit_is_kept_whole() -> None:
    tool = "t" * (PROVIDER_NAME_LIMIT - len("s__"))

    assert provider_tool_names([("s", tool)]) == [f"s__{tool}"]


def test_provider_names_honour_a_smaller_limit() -> None:
    [name] = provider_tool_names([("server", "a_rather_long_tool_name")], limit=20)

    assert len(name) == 20
    assert HASH_SUFFIX.search(name)


def test_provider_names_are_deterministic() -> None:
    pairs = [("demo server", "x" * 90), ("a.b", "c"), ("a b", "c"), ("s", "t")]

    assert provider_tool_names(pairs) == provider_tool_names(list(pairs))


# --- tool_result_text ----------------------------------------------------------------------


def test_result_text_joins_text_blocks() -> None:
    result: JSONDict = {"content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}]}

    assert tool_result_text(result) == "one\ntwo"


def test_result_text_prefers_text_over_structured_content() -> None:
    assert tool_result_text(FORECAST) == "Paris today: sunny, 12–18 °C."


def test_result_text_uses_structured_content_when_there_is_no_text() -> None:
    result: JSONDict = {"content": [], "structuredContent": {"city": "Zürich", "high_c": 3}}

    assert tool_result_text(result) == '{"city": "Zürich", "high_c": 3}'


def test_result_text_describes_what_a_model_cannot_read() -> None:
    result: JSONDict = {
        "content": [
            {"type": "image", "data": "iVBORw0KGgo=", "mimeType": "image/png"},
            {"type": "audio", "data": "AAAA"},
            {"type": "resource", "resource": {"uri": "file:///a.txt", "text": "inline text"}},
            {"type": "resource", "resource": {"uri": "file:///b.bin", "blob": "AAAA"}},
            {"type": "resource_link", "uri": "file:///c.txt", "name": "c"},
        ]
    }

    assert tool_result_text(result).split("\n") == [
        "[image content: image/png]",
        "[audio content: unknown type]",
        "inline text",
        "[embedded resource]",
        "[resource link: file:///c.txt]",
    ]


def test_result_text_of_nothing_is_empty() -> None:
    assert tool_result_text(None) == ""
    assert tool_result_text({"content": []}) == ""
