"""The agent loop's limits: tool calls per reply and per turn, and arguments no transport can carry."""

from __future__ import annotations

import tracemalloc

from conversations.loop.agent import AgentTurn, check_call, run_agent
from conversations.loop.llm import ToolCall
from conversations.loop.paradigms.native import NativeParadigm
from tests.conversations.loop.test_agent import (
    OFFERED,
    TOOLS,
    FakeHost,
    MemoryRecorder,
    ScriptedProvider,
    call,
    ok,
    render,
    reply,
    text_result,
    tool_messages,
)


def limited(
    *script: object, per_reply: int = 16, per_turn: int = 64
) -> tuple[ScriptedProvider, FakeHost, MemoryRecorder, object]:
    provider = ScriptedProvider(list(script))  # type: ignore[arg-type]
    host = FakeHost({"calculate": ok(text_result("2"))})
    recorder = MemoryRecorder()
    outcome = run_agent(
        AgentTurn(
            question="Add up everything.",
            tools=TOOLS,
            max_calls_per_reply=per_reply,
            max_calls_per_turn=per_turn,
        ),
        paradigm=NativeParadigm(),
        provider=provider,
        host=host,
        recorder=recorder,
        render=render,
    )
    return provider, host, recorder, outcome


def many(count: int, prefix: str = "call") -> list[object]:
    return [call(f"{prefix}_{n}", "demo__calculate", '{"expression": "1 + 1"}') for n in range(count)]


def test_a_reply_of_ten_thousand_calls_runs_sixteen_and_refuses_the_rest_to_the_model() -> None:
    tracemalloc.start()
    try:
        provider, host, recorder, outcome = limited(reply(None, *many(10_000)), reply("Done."))  # type: ignore[arg-type]
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()

    assert outcome.status == "done"  # type: ignore[attr-defined]
    assert len(host.calls) == 16
    assert recorder.kinds() == ["decide", *["tool"] * 16, "answer"]
    decide = recorder.steps[0]
    assert decide["status"] == "error"
    assert len(decide["calls"]) == 16
    assert decide["diagnostics"][-1] == (
        "not run: the reply held 10000 tool calls and at most 16 of one reply are run "
        "(the profile max_calls_per_reply, or AGENT_MAX_CALLS_PER_REPLY); the other 9984 went back "
        "to the model as error results "
        "(the raw response holds them all)"
    )
    answers = tool_messages(provider.requests[1])
    assert len(answers) == 10_000
    assert [m.tool_call_id for m in answers[15:17]] == ["call_15", "call_16"]
    assert answers[16].is_error and answers[16].content == (
        "Error: not run: at most 16 tool calls of one reply are run"
    )
    assert not answers[15].is_error
    assert peak < 200_000_000


def test_calls_past_the_turn_limit_are_refused_with_the_reason_on_their_step() -> None:
    provider, host, recorder, outcome = limited(
        reply(None, *many(3, "first")), reply(None, *many(3, "second")), reply("Done."), per_turn=4
    )

    assert len(host.calls) == 4
    tools = [step for step in recorder.steps if step["kind"] == "tool"]
    assert [step["status"] for step in tools] == ["ok", "ok", "ok", "ok", "error", "error"]
    assert tools[-1]["error"] == (
        "not sent: this turn has sent its 4 tool calls, the most one turn may send "
        "(the profile max_calls_per_turn, or AGENT_MAX_CALLS_PER_TURN)"
    )
    assert [m.is_error for m in tool_messages(provider.requests[2])][-3:] == [False, True, True]
    assert outcome.status == "done"  # type: ignore[attr-defined]


def test_a_reply_within_the_limit_runs_every_call() -> None:
    _, host, recorder, _ = limited(reply(None, *many(16)), reply("Done."))

    assert len(host.calls) == 16
    assert recorder.steps[0]["status"] == "ok"
    assert not any("AGENT_MAX_CALLS" in note for note in recorder.steps[0].get("diagnostics", []))


def test_a_lone_surrogate_in_the_arguments_is_not_sent_and_says_where() -> None:
    checked = check_call(ToolCall("c1", "demo__get_weather_forecast", "", {"city": "Pa\udfffris"}), OFFERED)

    assert checked.error == (
        "the arguments hold text no JSON encoder can send (lone surrogate at city, character 2: U+DFFF)"
    )


def test_a_lone_surrogate_in_a_nested_key_names_the_key() -> None:
    checked = check_call(
        ToolCall("c1", "demo__get_weather_forecast", "", {"city": "Paris", "x": [{"\ud800": 1}]}),
        {"demo__get_weather_forecast": TOOLS[0]},
    )

    assert "lone surrogate at the name of x[0].\\ud800, character 0: U+D800" in checked.error
    assert checked.error.encode()  # the message itself can be stored
