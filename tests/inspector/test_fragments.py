"""The rendered rows and turns: the five columns, the waiting states, escaping, catch-up messages."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.template.loader import render_to_string
from django.utils import timezone

from conversations.models import Conversation, Exchange, Step, Turn
from inspector.fragments import render_catch_up, render_row, render_turn, timestamp_iso
from tests.factories import (
    ConversationFactory,
    ExchangeFactory,
    McpServerFactory,
    StepFactory,
    TurnFactory,
)

pytestmark = pytest.mark.django_db

HOSTILE_SCRIPT = "<script>alert(1)</script>"
HOSTILE_IMG = "<img src=x onerror=alert(document.cookie)>"

LLM_REQUEST = json.dumps(
    {
        "model": "demo",
        "messages": [{"role": "user", "content": "What is the weather in Paris tomorrow?"}],
        "tools": [{"type": "function", "function": {"name": "demo__get_forecast"}}],
        "tool_choice": "auto",
    }
)
LLM_RESPONSE = json.dumps(
    {
        "choices": [
            {
                "finish_reason": "tool_calls",
                "message": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "id": "call_1",
                            "type": "function",
                            "function": {"name": "demo__get_forecast", "arguments": '{"city": "Paris"}'},
                        }
                    ],
                },
            }
        ]
    }
)


def make_turn(**fields: Any) -> Turn:
    return TurnFactory(**fields)


def decide_row(turn: Turn) -> Step:
    """A decide step: one model call, a valid call that ran and an unknown tool that never did."""
    server = McpServerFactory(demo=True)
    decide = StepFactory(
        turn=turn,
        kind=Step.Kind.DECIDE,
        title="calls get_forecast, launch_rockets",
        calls=[
            {
                "id": "call_1",
                "name": "demo__get_forecast",
                "arguments_text": '{"city": "Paris"}',
                "arguments": {"city": "Paris"},
                "valid": True,
                "error": "",
                "server": "demo",
                "tool": "get_forecast",
            },
            {
                "id": "call_2",
                "name": "launch_rockets",
                "arguments_text": "{",
                "arguments": None,
                "valid": False,
                "error": "unknown tool 'launch_rockets'; the tools offered are: demo__get_forecast",
                "server": None,
                "tool": None,
            },
        ],
        diagnostics=["launch_rockets: arguments are not valid JSON (Expecting property name)"],
    )
    ExchangeFactory(step=decide, request_body=LLM_REQUEST, response_body=LLM_RESPONSE, duration_ms=850)
    ran = StepFactory(
        turn=turn,
        parent=decide,
        kind=Step.Kind.TOOL,
        title="demo/get_forecast",
        tool_name="get_forecast",
        server=server,
        arguments={"city": "Paris"},
        result={"content": [{"type": "text", "text": "sunny"}]},
    )
    ExchangeFactory(
        step=ran,
        mcp=True,
        server=server,
        jsonrpc_id="7",
        duration_ms=42,
        request_body=json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "method": "tools/call",
                "params": {"name": "get_forecast", "arguments": {"city": "Paris"}},
            }
        ),
        response_body=json.dumps(
            {
                "jsonrpc": "2.0",
                "id": 7,
                "result": {"content": [{"type": "text", "text": "Paris: sunny, 21 C"}]},
            }
        ),
    )
    ExchangeFactory(
        step=ran,
        mcp=True,
        server=server,
        label="notifications/message",
        direction="server",
        jsonrpc_id="",
        request_body="",
        status="",
        response_body=json.dumps(
            {
                "jsonrpc": "2.0",
                "method": "notifications/message",
                "params": {"level": "info", "data": "fetching"},
            }
        ),
    )
    ExchangeFactory(
        step=ran,
        mcp=True,
        server=server,
        label="stderr",
        direction="server",
        jsonrpc_id="",
        request_body="",
        status="",
        response_body="demo server: looked up Paris\n",
    )
    StepFactory(
        turn=turn,
        parent=decide,
        kind=Step.Kind.TOOL,
        status=Step.Status.ERROR,
        title="launch_rockets",
        tool_name="launch_rockets",
        is_error=True,
        error="not sent: unknown tool 'launch_rockets'; the tools offered are: demo__get_forecast",
    )
    return decide


def html_of(conversation: Conversation, step: Step) -> str:
    message = render_row(conversation=conversation, step_id=step.pk)
    assert message is not None
    return message["html"]


# --- one row, five columns ------------------------------------------------------------------


def test_a_decide_row_shows_all_five_columns() -> None:
    turn = make_turn()
    decide = decide_row(turn)

    message = render_row(conversation=turn.conversation, step_id=decide.pk)

    assert message is not None
    assert (message["type"], message["turn_id"], message["step_id"], message["seq"]) == (
        "row",
        turn.pk,
        decide.pk,
        decide.seq,
    )
    html = message["html"]
    assert f'id="step-{decide.pk}"' in html
    # ① the request to the model, ② its raw response: the exact bodies, pretty-printed and highlighted
    assert "POST /chat/completions" in html
    assert "What is the weather in Paris tomorrow?" in html
    assert "finish_reason" in html
    assert 'class="body hl"' in html
    assert "850 ms" in html
    # ③ the parsed calls and the validator's verdict, with the parser's diagnostics
    assert "demo__get_forecast" in html and "demo/get_forecast" in html
    assert "✓ valid" in html and "✗ rejected" in html
    assert "unknown tool &#x27;launch_rockets&#x27;" in html
    assert "arguments are not valid JSON" in html
    # ④ the JSON-RPC request and ⑤ its result, with the id, the duration and what else the server said
    assert "tools/call" in html
    assert "id 7" in html
    assert "42 ms" in html
    assert "Paris: sunny, 21 C" in html
    assert "notifications/message" in html and "fetching" in html
    assert "demo server: looked up Paris" in html
    # a call that was refused never reached the server, and says so
    assert "Never sent to the server" in html


def test_exchange_headers_are_there_but_collapsed() -> None:
    turn = make_turn()
    step = StepFactory(turn=turn)
    ExchangeFactory(step=step, request_headers={"content-type": "application/json", "x-trace": "abc"})

    html = html_of(turn.conversation, step)

    assert "request headers (2)" in html
    assert '<details class="headers"' in html
    assert "x-trace" in html


def test_a_connect_row_shows_the_session_notes_and_the_handshake() -> None:
    turn = make_turn()
    server = McpServerFactory(demo=True)
    connect = StepFactory(
        turn=turn,
        kind=Step.Kind.CONNECT,
        title="3 tools from 1 server(s)",
        text="demo: connected (session #1); inspector-demo 1.0; protocol 2025-06-18; 3 tools",
        diagnostics=["other: connection refused"],
        status=Step.Status.ERROR,
    )
    ExchangeFactory(
        step=connect,
        mcp=True,
        server=server,
        label="initialize",
        jsonrpc_id="0",
        request_body='{"jsonrpc": "2.0", "id": 0, "method": "initialize"}',
        response_body='{"jsonrpc": "2.0", "id": 0, "result": {"protocolVersion": "2025-06-18"}}',
    )
    ExchangeFactory(step=connect, mcp=True, server=server, label="tools/list", jsonrpc_id="1")

    html = html_of(turn.conversation, connect)

    assert "connected (session #1)" in html
    assert "other: connection refused" in html
    assert "initialize" in html and "tools/list" in html
    assert "protocolVersion" in html
    assert "no model call" in html


def test_an_answer_row_shows_the_model_call_and_the_answer_text() -> None:
    turn = make_turn()
    answer = StepFactory(turn=turn, kind=Step.Kind.ANSWER, title="final answer", text="It will be sunny.")
    ExchangeFactory(step=answer)

    html = html_of(turn.conversation, answer)

    assert "Final answer" in html
    assert "It will be sunny." in html
    assert "POST /chat/completions" in html


def test_an_error_row_shows_the_error_prominently_with_the_http_body() -> None:
    turn = make_turn(status=Turn.Status.FAILED, answer="", error="the model call failed")
    error = StepFactory(
        turn=turn,
        kind=Step.Kind.ERROR,
        status=Step.Status.ERROR,
        title="the model call failed",
        error="HTTP 500 from the provider",
    )
    ExchangeFactory(step=error, status="500", response_body='{"error": {"message": "upstream exploded"}}')

    html = html_of(turn.conversation, error)

    assert 'class="step-error" role="alert"' in html
    assert "HTTP 500 from the provider" in html
    assert "upstream exploded" in html
    assert "tone-error" in html


def test_a_running_decide_step_is_shown_waiting() -> None:
    turn = make_turn(status=Turn.Status.RUNNING, answer="")
    step = StepFactory(turn=turn, status=Step.Status.RUNNING, title="model call 1")

    html = html_of(turn.conversation, step)

    assert "waiting for the model…" in html
    assert "waiting…" in html


def test_a_running_tool_call_is_shown_waiting_for_the_server() -> None:
    turn = make_turn(status=Turn.Status.RUNNING, answer="")
    decide = StepFactory(turn=turn, status=Step.Status.RUNNING)
    ExchangeFactory(step=decide)
    StepFactory(turn=turn, parent=decide, kind=Step.Kind.TOOL, status=Step.Status.RUNNING, title="demo/slow")

    html = html_of(turn.conversation, decide)

    assert "waiting for the server…" in html


def test_unparseable_arguments_are_shown_raw() -> None:
    turn = make_turn()
    step = StepFactory(
        turn=turn,
        calls=[
            {
                "id": "c",
                "name": "demo__add",
                "arguments_text": "{a: 1",
                "arguments": None,
                "valid": False,
                "error": "the arguments for demo__add are not a JSON object",
                "server": "demo",
                "tool": "add",
            }
        ],
    )

    html = html_of(turn.conversation, step)

    assert "raw arguments (not a JSON object)" in html
    assert "{a: 1" in html


def test_a_long_payload_starts_collapsed_with_its_size() -> None:
    turn = make_turn()
    step = StepFactory(turn=turn)
    big = json.dumps({"items": [{"n": n, "text": "lorem ipsum " * 3} for n in range(200)]})
    ExchangeFactory(step=step, response_body=big)

    html = html_of(turn.conversation, step)

    assert '<details class="payload" data-key="ex-' in html
    assert "lines ·" in html and "KB" in html


def test_a_collapsed_json_body_shows_an_outline_of_its_top_level() -> None:
    turn = make_turn()
    step = StepFactory(turn=turn)
    tools = [{"type": "function", "function": {"name": f"tool_{n}", "parameters": {}}} for n in range(30)]
    ExchangeFactory(step=step, request_body=json.dumps({"model": "demo", "messages": [{}], "tools": tools}))

    html = html_of(turn.conversation, step)

    assert "{&quot;model&quot;: &quot;demo&quot;, &quot;messages&quot;: [1], &quot;tools&quot;: [30]}" in html


def test_a_short_payload_is_shown_open() -> None:
    turn = make_turn()
    step = StepFactory(turn=turn)
    ExchangeFactory(step=step)

    assert '<details class="payload"' not in html_of(turn.conversation, step)


def test_a_non_json_body_is_shown_as_plain_text() -> None:
    turn = make_turn()
    step = StepFactory(turn=turn)
    ExchangeFactory(step=step, status="502", response_body="Bad Gateway")

    html = html_of(turn.conversation, step)

    assert '<pre class="body plain">Bad Gateway</pre>' in html


# --- hostile content ------------------------------------------------------------------------


def test_hostile_tool_results_and_model_output_are_escaped_everywhere() -> None:
    hostile = HOSTILE_SCRIPT + HOSTILE_IMG
    conversation = ConversationFactory(title=hostile)
    turn = make_turn(
        conversation=conversation,
        question=hostile,
        answer=hostile,
        tools=[
            {
                "server": "demo",
                "name": hostile,
                "provider_name": "demo__x",
                "description": hostile,
                "inputSchema": {"type": "object", "description": hostile},
            }
        ],
    )
    decide = StepFactory(
        turn=turn,
        title=hostile,
        text=hostile,
        diagnostics=[hostile],
        calls=[
            {
                "id": hostile,
                "name": hostile,
                "arguments_text": hostile,
                "arguments": None,
                "valid": False,
                "error": hostile,
                "server": None,
                "tool": None,
            }
        ],
    )
    ExchangeFactory(
        step=decide,
        label=hostile,
        request_headers={"x-evil": hostile},
        response_body=json.dumps({"choices": [{"message": {"content": hostile}}]}),
    )
    tool = StepFactory(turn=turn, parent=decide, kind=Step.Kind.TOOL, title=hostile, error=hostile)
    ExchangeFactory(
        step=tool,
        mcp=True,
        # Within the column sizes (jsonrpc_id 64, status 32) that PostgreSQL enforces.
        jsonrpc_id=HOSTILE_SCRIPT,
        status=HOSTILE_SCRIPT,
        error=hostile,
        response_body=json.dumps(
            {"jsonrpc": "2.0", "id": 1, "result": {"content": [{"type": "text", "text": hostile}]}}
        ),
    )
    ExchangeFactory(step=tool, mcp=True, label="stderr", request_body="", response_body=hostile)
    ExchangeFactory(
        step=tool, mcp=True, label="raw", request_body=hostile, response_body=hostile + "{not json"
    )

    row = render_row(conversation=conversation, step_id=decide.pk)
    turn_message = render_turn(conversation=conversation, turn_id=turn.pk)

    assert row is not None and turn_message is not None
    for html in (row["html"], turn_message["html"], turn_message["html_shell"]):
        assert "<script" not in html
        assert "<img" not in html
        assert "onerror=alert" not in html or "&lt;img src=x onerror=alert" in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in row["html"]
    assert "&lt;img src=x onerror=alert(document.cookie)&gt;" in row["html"]
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in turn_message["html"]  # the answer
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in turn_message["html_shell"]  # question and tools


def test_hostile_content_on_the_full_page_is_escaped(client: Any) -> None:
    conversation = ConversationFactory(title=HOSTILE_SCRIPT)
    turn = make_turn(conversation=conversation, question=HOSTILE_IMG, answer=HOSTILE_SCRIPT)
    step = StepFactory(turn=turn)
    ExchangeFactory(step=step, response_body=json.dumps({"content": HOSTILE_SCRIPT + HOSTILE_IMG}))
    client.force_login(conversation.owner)

    html = client.get(f"/c/{conversation.public_id}/").content.decode()

    assert "<script>alert" not in html
    assert "<img src=x" not in html
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in html


# --- messages -------------------------------------------------------------------------------


def test_render_row_refuses_other_conversations_and_child_steps() -> None:
    turn = make_turn()
    decide = decide_row(turn)
    child = decide.children.first()
    assert child is not None

    assert render_row(conversation=ConversationFactory(), step_id=decide.pk) is None
    assert render_row(conversation=turn.conversation, step_id=child.pk) is None


def test_the_turn_message_carries_its_status_block_and_a_shell_for_a_page_without_it() -> None:
    turn = make_turn(answer="Sunny, 21 °C.")
    StepFactory(turn=turn)

    message = render_turn(conversation=turn.conversation, turn_id=turn.pk)

    assert message is not None
    assert (message["type"], message["turn_id"], message["seq"], message["status"]) == (
        "turn",
        turn.pk,
        turn.seq,
        "done",
    )
    assert message["updated_at"] == timestamp_iso(turn.updated_at)
    assert message["html"].startswith(f'<div class="turn-status tone-ok" id="turn-status-{turn.pk}"')
    assert "Sunny, 21 °C." in message["html"]
    shell = message["html_shell"]
    assert f'id="turn-{turn.pk}"' in shell
    assert '<div class="rows"></div>' in shell  # rows arrive as row messages
    assert f'id="turn-status-{turn.pk}"' in shell
    assert render_turn(conversation=ConversationFactory(), turn_id=turn.pk) is None


def test_a_failed_turn_shows_its_error() -> None:
    turn = make_turn(status=Turn.Status.FAILED, answer="", error="the API key variable X is not set")

    message = render_turn(conversation=turn.conversation, turn_id=turn.pk)

    assert message is not None
    assert "The turn failed" in message["html"]
    assert "the API key variable X is not set" in message["html"]


def test_the_turn_header_lists_the_tools_offered() -> None:
    turn = make_turn(
        tools=[
            {
                "server": "demo",
                "name": "get_forecast",
                "provider_name": "demo__get_forecast",
                "description": "Weather forecast for a city.",
                "inputSchema": {"type": "object", "properties": {"city": {"type": "string"}}},
            }
        ],
        tool_choice="named",
        tool_choice_name="demo/get_forecast",
    )

    message = render_turn(conversation=turn.conversation, turn_id=turn.pk)

    assert message is not None
    shell = message["html_shell"]
    assert "1 tool offered" in shell
    assert "demo/get_forecast" in shell and "demo__get_forecast" in shell
    assert "Weather forecast for a city." in shell
    assert "inputSchema" in shell
    assert "Native function calling" in shell
    assert "demo model" in shell


def test_catch_up_sends_changed_turns_first_then_changed_rows_in_order() -> None:
    conversation = ConversationFactory()
    old_turn = make_turn(conversation=conversation)
    new_turn = make_turn(conversation=conversation, status=Turn.Status.RUNNING, answer="")
    long_ago = timezone.now() - timedelta(hours=1)
    stale = StepFactory(turn=old_turn)
    first = StepFactory(turn=new_turn)
    second = StepFactory(turn=new_turn)
    Turn.objects.filter(pk=old_turn.pk).update(updated_at=long_ago)
    Step.objects.filter(pk=stale.pk).update(updated_at=long_ago)
    since = timezone.now() - timedelta(minutes=1)

    messages = render_catch_up(conversation=conversation, since=since)

    assert [(m["type"], m.get("step_id", m["turn_id"])) for m in messages] == [
        ("turn", new_turn.pk),
        ("row", first.pk),
        ("row", second.pk),
    ]
    json.dumps(messages)  # they go over the websocket as they are


def test_catch_up_takes_a_naive_since_as_utc() -> None:
    turn = make_turn()
    StepFactory(turn=turn)
    since = (timezone.now() - timedelta(minutes=1)).replace(tzinfo=None)

    assert len(render_catch_up(conversation=turn.conversation, since=since)) == 2


def test_catch_up_includes_rows_stamped_exactly_at_since() -> None:
    turn = make_turn()
    step = StepFactory(turn=turn)
    step.refresh_from_db()

    messages = render_catch_up(conversation=turn.conversation, since=step.updated_at)

    assert ("row", step.pk) in [(m["type"], m.get("step_id")) for m in messages]


def test_timestamps_sort_as_text() -> None:
    moment = timezone.now().replace(microsecond=0)

    assert timestamp_iso(moment) < timestamp_iso(moment + timedelta(microseconds=1))
    assert timestamp_iso(moment).endswith(".000000+00:00")


def test_the_page_and_the_live_row_are_the_same_html(client: Any) -> None:
    turn = make_turn()
    decide = decide_row(turn)
    client.force_login(turn.conversation.owner)

    page = client.get(f"/c/{turn.conversation.public_id}/").content.decode()
    message = render_row(conversation=turn.conversation, step_id=decide.pk)

    assert message is not None
    assert message["html"].strip() in page


def test_exchange_fragment_renders_on_its_own() -> None:
    exchange = ExchangeFactory(mcp=True)

    html = render_to_string("inspector/_exchange.html", {"exchange": Exchange.objects.get(pk=exchange.pk)})

    assert f'id="exchange-{exchange.pk}"' in html
    assert "tools/call" in html
