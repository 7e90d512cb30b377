"""The rendered rows and turns: the five columns, the waiting states, escaping, catch-up messages."""

from __future__ import annotations

import json
from datetime import timedelta
from typing import Any

import pytest
from django.db import connection
from django.template.loader import render_to_string
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from conversations import selectors
from conversations.models import Conversation, Exchange, Step, TraceDelivery, Turn
from inspector.fragments import (
    VIEW_MAX_HELD,
    VIEW_MAX_TURNS,
    page_view_from_json,
    render_catch_up,
    render_row,
    render_turn,
    timestamp_iso,
)
from inspector.templatetags import inspector_tags
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


def test_a_body_rendered_again_is_taken_from_the_cache_and_shown_the_same(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    inspector_tags._shown_cache.clear()
    highlighted: list[str] = []
    real = inspector_tags.highlight

    def counting(text: str, lexer: Any, formatter: Any) -> str:
        highlighted.append(text)
        return str(real(text, lexer, formatter))

    monkeypatch.setattr(inspector_tags, "highlight", counting)
    turn = make_turn()
    step = StepFactory(turn=turn)
    ExchangeFactory(step=step, request_body=json.dumps({"tools": [HOSTILE_SCRIPT] * 60}), response_body="{}")

    first = html_of(turn.conversation, step)
    calls = len(highlighted)
    second = html_of(turn.conversation, step)

    # The exchange's body is highlighted once; what is highlighted again is the step's own
    # decoded JSON fields (not text, so not kept).
    assert sum("<script>" in text for text in highlighted[:calls]) == 1
    assert not any("<script>" in text for text in highlighted[calls:])
    assert second == first
    assert HOSTILE_SCRIPT not in second and "&lt;script&gt;" in second


def test_the_rendered_body_cache_keeps_to_its_budget_dropping_the_least_recent_first(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(inspector_tags, "SHOWN_CACHE_CHARS", 20_000)
    cache = inspector_tags._ShownCache()
    bodies = [json.dumps({"n": n, "pad": "x" * 1_000}) for n in range(30)]
    for body in bodies:
        cache.get(body)
    cache.get(bodies[-10])  # used again: the newest now
    cache.get(json.dumps({"n": "last", "pad": "x" * 1_000}))

    assert cache._chars <= 20_000
    assert sum(len(text) + len(shown.html) for text, shown in cache._entries.items()) == cache._chars
    assert bodies[0] not in cache._entries and bodies[-10] in cache._entries
    huge = json.dumps({"pad": "x" * 5_000})
    assert "x" * 5_000 in cache.get(huge).html and huge not in cache._entries  # over an eighth: not kept


def test_a_body_that_is_not_text_is_shown_without_the_cache() -> None:
    inspector_tags._shown_cache.clear()
    html = inspector_tags.payload({"a": HOSTILE_IMG})["html"]

    assert "&lt;img" in html and HOSTILE_IMG not in html
    assert not inspector_tags._shown_cache._entries


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

    assert '<pre tabindex="0" class="body plain">Bad Gateway</pre>' in html


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


def test_the_shell_carries_the_very_status_block_and_reads_the_turn_once(
    django_assert_max_num_queries: Any,
) -> None:
    turn = make_turn(
        answer="Sunny, 21 °C.", tools=[{"server": "demo", "name": "calc", "provider_name": "calc"}]
    )
    StepFactory(turn=turn)
    with django_assert_max_num_queries(8) as context:
        message = render_turn(conversation=turn.conversation, turn_id=turn.pk)
    assert message is not None

    assert message["html"] in message["html_shell"]
    # The status block (its waterfall reads the turn's steps) is rendered once for both.
    step_reads = [q for q in context.captured_queries if 'FROM "conversations_step"' in q["sql"]]
    assert len(step_reads) == 1, step_reads


def test_a_row_is_read_in_three_queries_with_its_tool_calls_and_every_exchange(
    django_assert_num_queries: Any,
) -> None:
    # Every doorbell is a row read in the web server (a connect row before any model call is
    # the first thing a new turn shows): the row, its tool calls, then all of their exchanges.
    turn = make_turn()
    decide = decide_row(turn)
    StepFactory(turn=turn, kind=Step.Kind.ANSWER, seq=decide.seq + 10)  # not the row's

    with django_assert_num_queries(3):
        row = selectors.step_row(conversation=turn.conversation, step_id=decide.pk)
        assert row is not None
        children = list(row.children.all())
        loaded = {step.pk: [exchange.pk for exchange in step.exchanges.all()] for step in [row, *children]}
        servers = [exchange.server for step in [row, *children] for exchange in step.exchanges.all()]
        turns = [step.turn.seq for step in [row, *children]]

    assert [child.title for child in children] == ["demo/get_forecast", "launch_rockets"]
    assert all(child.parent is row for child in children)
    assert loaded == {
        step.pk: list(step.exchanges.order_by("seq", "id").values_list("pk", flat=True))
        for step in Step.objects.filter(pk__in=loaded)
    }
    assert any(server is not None for server in servers) and turns == [turn.seq] * 3
    with django_assert_num_queries(3):  # the row's whole render reads nothing more
        assert render_row(conversation=turn.conversation, step_id=decide.pk) is not None
    # As the page reads it (``turn_rows``), so a row looks the same live and on a reload.
    (paged,) = [step for step in selectors.turn_rows(turn=turn) if step.pk == decide.pk]
    assert render_to_string("inspector/_step.html", {"conversation": turn.conversation, "step": row}) == (
        render_to_string("inspector/_step.html", {"conversation": turn.conversation, "step": paged})
    )


def test_a_row_without_tool_calls_is_read_in_two_queries_and_shows_none(
    django_assert_num_queries: Any,
) -> None:
    # Most doorbells name a row that has no tool calls (a connect step, an answer): the read does
    # not ask the database for calls it knows are not there.
    turn = make_turn()
    decide_row(turn)
    answer = StepFactory(turn=turn, kind=Step.Kind.ANSWER, seq=90)
    ExchangeFactory(turn=turn, step=answer, seq=90)

    with django_assert_num_queries(2):
        row = selectors.step_row(conversation=turn.conversation, step_id=answer.pk)
        assert row is not None
        assert selectors.loaded_calls(row) == []
        assert [exchange.step_id for exchange in selectors.loaded_exchanges(row)] == [answer.pk]
    with django_assert_num_queries(2):
        assert render_row(conversation=turn.conversation, step_id=answer.pk) is not None
    # A page of both kinds: the calls of the row that has them, none for the other.
    with django_assert_num_queries(3):
        rows = {
            row.pk: [child.title for child in selectors.loaded_calls(row)]
            for row in selectors.turn_rows(turn=turn)
        }
    assert rows[answer.pk] == [] and sorted(len(calls) for calls in rows.values()) == [0, 2]


def test_a_row_read_leaves_out_the_turns_history_and_seal_digests() -> None:
    history = [{"role": "user", "content": "x" * 100_000}]
    turn = make_turn(transcript=history, seal_steps=["d" * 64] * 50)
    decide = decide_row(turn)

    rows = [
        selectors.step_row(conversation=turn.conversation, step_id=decide.pk),
        *selectors.turn_rows(turn=turn),
    ]

    for row in rows:
        assert row is not None
        assert {"transcript", "seal_steps"} <= row.turn.get_deferred_fields()
    message = render_row(conversation=turn.conversation, step_id=decide.pk)
    assert message is not None and "x" * 1000 not in message["html"]


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


def _stamp(step: Step) -> str:
    step.refresh_from_db()
    return timestamp_iso(step.updated_at)


def _sent(messages: list[Any]) -> list[tuple[str, int]]:
    return [(m["type"], m.get("step_id", m["turn_id"])) for m in messages]


def test_a_catch_up_with_the_pages_view_leaves_out_the_rows_it_holds_at_their_version() -> None:
    turn = make_turn()
    held, changed, unseen = StepFactory(turn=turn), StepFactory(turn=turn), StepFactory(turn=turn)
    old_version = "2000-01-01T00:00:00.000000+00:00"
    view = page_view_from_json(
        {
            "turns": {
                str(turn.pk): {
                    "from_seq": 0,
                    "held": {str(held.pk): _stamp(held), str(changed.pk): old_version},
                }
            },
            "newest_seq": turn.seq,
        }
    )
    since = timezone.now() - timedelta(minutes=1)

    messages = render_catch_up(conversation=turn.conversation, since=since, view=view)

    assert _sent(messages) == [("turn", turn.pk), ("row", changed.pk), ("row", unseen.pk)]
    assert _sent(render_catch_up(conversation=turn.conversation, since=since)) == [
        ("turn", turn.pk),
        ("row", held.pk),
        ("row", changed.pk),
        ("row", unseen.pk),
    ]


def test_a_catch_up_with_the_pages_view_sends_no_row_the_page_would_drop() -> None:
    conversation = ConversationFactory()
    unlisted = make_turn(conversation=conversation)
    folded = make_turn(conversation=conversation)
    long_turn = make_turn(conversation=conversation)
    new = make_turn(conversation=conversation, status=Turn.Status.RUNNING, answer="")
    StepFactory(turn=unlisted), StepFactory(turn=folded)
    left_out, shown = StepFactory(turn=long_turn), StepFactory(turn=long_turn)
    fresh = StepFactory(turn=new)
    view = page_view_from_json(
        {
            "turns": {
                str(folded.pk): {"from_seq": None, "held": {}},
                str(long_turn.pk): {"from_seq": shown.seq, "held": {}},
            },
            "newest_seq": long_turn.seq,
        }
    )

    messages = render_catch_up(
        conversation=conversation, since=timezone.now() - timedelta(minutes=1), view=view
    )

    # The unlisted turn is neither listed nor new; nothing of the folded one is shown live.
    assert _sent(messages) == [
        ("turn", long_turn.pk),
        ("turn", new.pk),
        ("row", shown.pk),
        ("row", fresh.pk),
    ]
    assert left_out.pk not in [m.get("step_id") for m in messages]


def test_a_catch_up_with_the_pages_view_leaves_out_a_turn_status_it_holds_at_its_version() -> None:
    conversation = ConversationFactory()
    held, changed = make_turn(conversation=conversation), make_turn(conversation=conversation)
    held.refresh_from_db()
    view = page_view_from_json(
        {
            "turns": {
                str(held.pk): {"from_seq": 0, "held": {}, "status_at": timestamp_iso(held.updated_at)},
                str(changed.pk): {"from_seq": 0, "held": {}, "status_at": "2000-01-01T00:00:00.000000+00:00"},
            },
            "newest_seq": changed.seq,
        }
    )

    messages = render_catch_up(
        conversation=conversation, since=timezone.now() - timedelta(minutes=1), view=view
    )

    assert _sent(messages) == [("turn", changed.pk)]


@pytest.mark.parametrize(
    "view",
    [
        None,
        [],
        "turns",
        {"turns": []},
        {"turns": {}},
        {"turns": {}, "newest_seq": "7; drop table"},
        {"turns": {}, "newest_seq": True},
        {"turns": {}, "newest_seq": -1},
        {"turns": {"x": {"from_seq": 1, "held": {}}}, "newest_seq": 1},
        {"turns": {"1": {"from_seq": 1.5, "held": {}}}, "newest_seq": 1},
        {"turns": {"1": {"from_seq": 1, "held": []}}, "newest_seq": 1},
        {"turns": {"1": {"from_seq": 1, "held": {"2": 3}}}, "newest_seq": 1},
        {"turns": {"1": {"from_seq": 1, "held": {"2": "x" * 41}}}, "newest_seq": 1},
        {"turns": {"1": {"from_seq": 1, "held": {"٣": "2026-01-01"}}}, "newest_seq": 1},
        {"turns": {"1": "folded"}, "newest_seq": 1},
        {"turns": {"1": {"from_seq": 1, "held": {}, "status_at": 5}}, "newest_seq": 1},
        {"turns": {"1": {"from_seq": 1, "held": {}, "status_at": "x" * 41}}, "newest_seq": 1},
        {"turns": {"9" * 40: {"from_seq": 1, "held": {}}}, "newest_seq": 1},
        {"turns": {str(n): {"from_seq": 1, "held": {}} for n in range(VIEW_MAX_TURNS + 1)}, "newest_seq": 1},
        {
            "turns": {"1": {"from_seq": 1, "held": {str(n): "s" for n in range(VIEW_MAX_HELD + 1)}}},
            "newest_seq": 1,
        },
    ],
)
def test_a_malformed_or_oversized_view_is_refused_with_a_reason(view: Any) -> None:
    with pytest.raises(ValueError, match=r"."):
        page_view_from_json(view)


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


# --- column 1: the spliced prompt -----------------------------------------------------------

CHATML_PROMPT = (
    "<|im_start|>system\n"
    "You can call these tools:\n"
    '{"name": "demo__get_forecast", "description": "Forecast for a city"}\n'
    "<|im_end|>\n"
    "<|im_start|>user\n"
    "What is the weather in Paris tomorrow?<|im_end|>\n"
    "<|im_start|>assistant\n"
)
COUNTED = {
    "encoding": "o200k_base",
    "prompt": 1234,
    "tools": {"demo__get_forecast": 87, "demo__calculate": 41},
    "results": [19],
    "note": "",
}


def model_call(turn: Turn, **fields: Any) -> Step:
    """A decide step with one model call on the wire."""
    step = StepFactory(turn=turn, **fields)
    ExchangeFactory(step=step, request_body=LLM_REQUEST, response_body=LLM_RESPONSE)
    return step


def test_an_exact_prompt_comes_first_with_its_badge_source_and_token_counts() -> None:
    turn = make_turn()
    step = model_call(
        turn,
        prompt=CHATML_PROMPT,
        prompt_exact=True,
        prompt_source="the profile's chat template",
        tokens=COUNTED,
        usage={"prompt_tokens": 1240, "completion_tokens": 31, "total_tokens": 1271},
    )

    html = html_of(turn.conversation, step)

    assert "Spliced prompt" in html
    assert '<span class="badge prompt-exact"' in html and ">exact</span>" in html
    assert "prompt-illustrative" not in html
    assert "the profile&#x27;s chat template" in html
    assert "<strong>1,234</strong> tokens · <code>o200k_base</code>" in html
    # Per-tool definition tokens in a small collapsed table, per tool-result tokens beside it.
    assert '<details class="token-table"' in html
    assert "tool definitions: 128 tokens in 2 tools" in html
    assert '<code>demo__get_forecast</code></td><td class="num">87</td>' in html
    assert "#1 19 tokens" in html
    # The raw request body is still there, after the prompt; usage sits with the raw response.
    assert html.index("Spliced prompt") < html.index("Raw HTTP request body") < html.index('"tool_choice"')
    assert "<strong>1,240</strong> tokens in · <strong>31</strong> out · 1,271 total" in html
    assert html.index('class="cell ex-response"') < html.index('class="usage"')


def test_an_illustrative_prompt_is_labelled_with_where_it_comes_from() -> None:
    turn = make_turn()
    source = "generic ChatML template (illustrative: the provider does not publish its own)"
    step = model_call(turn, prompt=CHATML_PROMPT, prompt_exact=False, prompt_source=source, tokens=COUNTED)

    html = html_of(turn.conversation, step)

    assert '<span class="badge prompt-illustrative"' in html and ">illustrative</span>" in html
    assert "prompt-exact" not in html
    assert source in html


@pytest.mark.parametrize(
    ("source", "badge"),
    [
        (
            "failed: the profile's chat template: template undefined value at line 3: x — shown instead: "
            "the generic ChatML template (illustrative)",
            "failed",
        ),
        ("llama.cpp /props — warning: bos_token not configured, rendered empty (not exact)", "warning"),
    ],
)
def test_a_failed_or_warned_template_is_badged_so_never_exact(source: str, badge: str) -> None:
    turn = make_turn()
    step = model_call(turn, prompt=CHATML_PROMPT, prompt_exact=False, prompt_source=source, tokens=COUNTED)

    html = html_of(turn.conversation, step)

    assert f'<span class="badge prompt-{badge}"' in html and f">{badge}</span>" in html
    assert "prompt-exact" not in html and "prompt-illustrative" not in html


def test_without_an_encoding_the_note_is_shown_and_no_count_is_made_up() -> None:
    turn = make_turn()
    note = "no offline tokenizer is known for the model 'mystery-1'"
    step = model_call(
        turn,
        prompt=CHATML_PROMPT,
        prompt_source="generic ChatML template (illustrative)",
        tokens={"encoding": None, "prompt": None, "tools": {}, "results": [], "note": note},
    )

    html = html_of(turn.conversation, step)

    assert "No token counts: no offline tokenizer is known for the model &#x27;mystery-1&#x27;" in html
    assert "token-count" not in html
    assert "tool definitions:" not in html
    assert "tokens in" not in html  # no usage reported either: nothing shown


def test_a_long_prompt_starts_collapsed_like_other_payloads() -> None:
    turn = make_turn()
    prompt = "\n".join(f"line {n}: tool description text" for n in range(200))
    step = model_call(turn, prompt=prompt, prompt_exact=True, tokens=COUNTED)

    html = html_of(turn.conversation, step)

    assert f'<details class="payload" data-key="step-{step.pk}-prompt-body">' in html
    assert "200 lines" in html


def test_the_second_model_call_shows_what_changed_in_the_prompt_since_the_first(client: Client) -> None:
    turn = make_turn()
    first = model_call(turn, prompt=CHATML_PROMPT, prompt_exact=True, tokens=COUNTED)
    StepFactory(turn=turn, parent=first, kind=Step.Kind.TOOL, title="demo/get_forecast")
    follow_up = CHATML_PROMPT.replace("You can call these tools:", "Tools:").replace(
        "<|im_start|>assistant\n", "<|im_start|>tool\nParis: sunny, 21 C<|im_end|>\n<|im_start|>assistant\n"
    )
    second = model_call(turn, kind=Step.Kind.ANSWER, prompt=follow_up, prompt_exact=True, tokens=COUNTED)

    first_html = html_of(turn.conversation, first)
    second_html = html_of(turn.conversation, second)

    assert "What changed since the previous model call" not in first_html
    # The row carries a cheap summary (where the prompts part) and the URL of the line diff,
    # which is computed only when the reader opens it.
    diff_url = f"/c/{turn.conversation.public_id}/steps/{second.pk}/prompt-diff"
    assert (
        f'<details class="prompt-diff" data-key="step-{second.pk}-diff" data-diff-url="{diff_url}">'
        in second_html
    )
    changed_line = CHATML_PROMPT[: CHATML_PROMPT.index("You can call these tools:")].count("\n") + 1
    delta = len(follow_up) - len(CHATML_PROMPT)
    assert f'from line {changed_line} on <span class="diff-chars">(+{delta} characters)</span>' in second_html
    assert '<span class="dl add">' not in second_html

    client.force_login(turn.conversation.owner)
    diff_html = client.get(diff_url).content.decode()

    assert '<span class="diff-count add">+3</span> <span class="diff-count del">−1</span> lines' in diff_html
    assert (
        '<span class="dl add"><span class="op">+</span>Paris: sunny, 21 C&lt;|im_end|&gt;</span>' in diff_html
    )
    assert '<span class="dl del"><span class="op">−</span>You can call these tools:</span>' in diff_html
    assert '<span class="dl ctx">' in diff_html


def test_a_prompt_that_grew_at_the_end_is_summarised_by_the_lines_added() -> None:
    turn = make_turn()
    model_call(turn, prompt="system\nuser: hi\n", prompt_exact=True)
    grown = model_call(turn, prompt="system\nuser: hi\ntool: 42\nassistant: ", prompt_exact=True)

    html = html_of(turn.conversation, grown)

    assert (
        '<span class="diff-count add">+2</span> lines at the end <span class="diff-chars">(+20 characters)</span>'
        in html
    )


def test_the_diff_compares_with_the_previous_model_call_of_the_same_turn_only(client: Client) -> None:
    earlier_turn = make_turn()
    model_call(earlier_turn, prompt="a prompt of another turn", prompt_exact=True)
    turn = make_turn(conversation=earlier_turn.conversation)
    first = model_call(turn, prompt="system\nuser: hi", prompt_exact=True)
    repeat = model_call(turn, prompt="system\nuser: hi", prompt_exact=True)

    assert "What changed" not in html_of(turn.conversation, first)
    assert '<span class="diff-summary">nothing</span>' in html_of(turn.conversation, repeat)
    client.force_login(turn.conversation.owner)
    diff = client.get(f"/c/{turn.conversation.public_id}/steps/{repeat.pk}/prompt-diff")
    assert "Identical to the previous model call" in diff.content.decode()
    # The first call of a turn has nothing to compare with, even though an earlier turn had a prompt.
    assert client.get(f"/c/{turn.conversation.public_id}/steps/{first.pk}/prompt-diff").status_code == 404


def test_a_model_call_still_waiting_shows_its_prompt_already() -> None:
    turn = make_turn(status=Turn.Status.RUNNING)
    step = StepFactory(turn=turn, status=Step.Status.RUNNING, prompt=CHATML_PROMPT, tokens=COUNTED)

    html = html_of(turn.conversation, step)

    assert "Spliced prompt" in html
    assert "waiting for the model…" in html


def test_hostile_prompts_sources_and_tool_names_are_escaped() -> None:
    hostile = HOSTILE_SCRIPT + HOSTILE_IMG
    turn = make_turn()
    model_call(turn, prompt="system\n" + hostile, prompt_exact=True)
    step = model_call(
        turn,
        prompt="system\n" + hostile + "\n" + hostile,
        prompt_source=hostile,
        tokens={"encoding": hostile, "prompt": 5, "tools": {hostile: 3}, "results": [], "note": hostile},
    )

    html = html_of(turn.conversation, step)

    assert "<script" not in html
    assert "<img" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 5


# --- fallbacks and intent labels ------------------------------------------------------------


def test_a_fallback_row_says_what_was_downgraded_and_why() -> None:
    turn = make_turn()
    step = StepFactory(
        turn=turn,
        kind=Step.Kind.FALLBACK,
        title="native → structured",
        text="the provider refused tools: HTTP 400 'tools is not supported for this model'",
    )

    html = html_of(turn.conversation, step)

    assert 'class="step kind-fallback' in html
    assert '<div class="fallback-note" role="note">' in html
    assert "Paradigm downgrade" in html and "native → structured" in html
    assert "the provider refused tools: HTTP 400 &#x27;tools is not supported for this model&#x27;" in html
    assert "area-model" not in html  # no empty columns around it


def test_an_intent_label_is_shown_in_the_parsed_column() -> None:
    turn = make_turn()
    step = model_call(turn, title="classify the question", text="get_forecast")

    html = html_of(turn.conversation, step)

    parsed = html[html.index('class="area area-parsed"') : html.index('class="area area-rpc"')]
    assert "get_forecast" in parsed


def test_no_turn_of_a_page_or_a_catch_up_reads_its_trace_delivery_on_its_own(client: Client) -> None:
    """Each turn's status block says how its trace went to the collector: read with the turns
    (one join), not one query per turn as the block is rendered."""
    conversation = ConversationFactory()
    turns = [make_turn(conversation=conversation) for _ in range(4)]
    TraceDelivery.objects.create(turn=turns[1], status=TraceDelivery.Status.SENT, attempts=2)
    client.force_login(conversation.owner)

    with CaptureQueriesContext(connection) as page:
        html = client.get(reverse("inspector-conversation", args=[conversation.public_id])).content.decode()
    with CaptureQueriesContext(connection) as caught_up:
        messages = render_catch_up(conversation=conversation, since=timezone.now() - timedelta(hours=1))
    with CaptureQueriesContext(connection) as one:
        message = render_turn(conversation=conversation, turn_id=turns[1].pk)

    for queries in (page, caught_up, one):
        assert not [q for q in queries.captured_queries if 'FROM "conversations_tracedelivery"' in q["sql"]]
    assert f'id="trace-delivery-{turns[1].pk}" data-status="sent"' in html
    assert (
        sum(f'id="trace-delivery-{turns[1].pk}"' in m["html"] for m in messages if m["type"] == "turn") == 1
    )
    assert message is not None and 'data-status="sent"' in message["html"]
