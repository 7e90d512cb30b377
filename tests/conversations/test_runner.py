"""Whole turns through the runner on real parts: the database, the demo model served in-process
by the app's own view, and real stdio MCP servers (the bundled one and a deliberately broken one).
Each failure path must end as a recorded, explained step with the turn closed cleanly."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.db import connection

from conversations import runner
from conversations.models import Conversation, Exchange, ModelProfile, Step, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure, turn_start
from servers import gateway
from servers.models import McpServer
from servers.services import demo_server_ensure
from tests.factories import ConversationFactory, TurnFactory

REPO_ROOT = Path(__file__).resolve().parents[2]
WEATHER = "What will the weather be like in Beijing tomorrow?"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture
def alice() -> User:
    return User.objects.create_user("alice")


@pytest.fixture
def broken_server() -> McpServer:
    return McpServer.objects.create(
        name="broken",
        transport="stdio",
        command=sys.executable,
        args=["-m", "tests.fixtures.broken_server"],
        cwd=str(REPO_ROOT),
        call_timeout=2,
        allow_non_staff_spawn=True,
    )


def _run(
    owner: User, question: str, servers: list[McpServer] | None = None, **options: str
) -> tuple[Conversation, Turn]:
    conversation, turn = conversation_start(
        owner=owner,
        model_profile=demo_profile_ensure(),
        question=question,
        servers=servers if servers is not None else [demo_server_ensure()],
        dispatch=False,
        **options,
    )
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return conversation, turn


def _rows(turn: Turn) -> list[str]:
    return list(
        Step.objects.filter(turn=turn, parent__isnull=True).order_by("seq").values_list("kind", flat=True)
    )


def _tool_steps(turn: Turn) -> list[Step]:
    return list(Step.objects.filter(turn=turn, kind="tool").order_by("seq"))


def test_the_weather_question_is_answered_from_a_real_tools_call(alice: User) -> None:
    _, turn = _run(alice, WEATHER)

    assert turn.status == Turn.Status.DONE
    assert "Beijing" in turn.answer
    assert _rows(turn) == ["connect", "decide", "answer"]
    offered = {tool["provider_name"]: tool["name"] for tool in turn.tools}
    assert offered["demo__get_weather_forecast"] == "get_weather_forecast"
    (tool_step,) = _tool_steps(turn)
    assert tool_step.arguments == {"city": "Beijing", "day": "tomorrow"}
    assert tool_step.result["structuredContent"]["city"] == "Beijing"
    llm = Exchange.objects.filter(turn=turn, channel="llm").order_by("seq").first()
    assert llm is not None and llm.label == "POST /demo-model/v1/chat/completions"
    sent = json.loads(llm.request_body)
    assert [t["function"]["name"] for t in sent["tools"]] == [t["provider_name"] for t in turn.tools]
    labels = list(Exchange.objects.filter(turn=turn, channel="mcp").values_list("label", flat=True))
    assert "tools/list" in labels and "tools/call" in labels


def test_the_connect_step_opens_before_the_tool_overrides_are_read_and_they_still_apply(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The connect step's row is the first a watching page shows: the turn opens it before it
    reads anything it can read later (the conversation's tool-definition overrides)."""
    happened: list[str] = []
    opened = runner.TurnRecorder.step_open

    def step_open(recorder: runner.TurnRecorder, **fields: Any) -> int:
        happened.append(f"open {fields['kind']}")
        return opened(recorder, **fields)

    def overrides(conversation: Conversation) -> dict[str, dict[str, Any]]:
        happened.append("read overrides")
        return {"demo/get_weather_forecast": {"description": "Overridden for this test."}}

    monkeypatch.setattr(runner.TurnRecorder, "step_open", step_open)
    monkeypatch.setattr(runner, "tool_overrides_for", overrides)

    _, turn = _run(alice, WEATHER)

    assert happened[:2] == ["open connect", "read overrides"]
    assert turn.status == Turn.Status.DONE
    (weather,) = [tool for tool in turn.tools if tool["name"] == "get_weather_forecast"]
    assert weather["description"] == "Overridden for this test."


def test_a_first_turn_reads_no_history_and_a_follow_up_reads_the_turn_before_it(
    alice: User, django_assert_num_queries: Any
) -> None:
    conversation = ConversationFactory(owner=alice)
    first = TurnFactory(conversation=conversation, seq=1, question="first?", answer="one")
    second = TurnFactory(conversation=conversation, seq=2, question="second?", answer="two")

    with django_assert_num_queries(0):
        assert runner._history(first) == []
    with django_assert_num_queries(1):
        history = runner._history(second)
    assert [(m.role, m.content) for m in history] == [("user", "first?"), ("assistant", "one")]


def test_a_follow_up_to_an_unfinished_turn_reads_its_question_and_answer_after_the_history_before_it(
    alice: User, django_assert_num_queries: Any
) -> None:
    conversation = ConversationFactory(owner=alice)
    transcript = [{"role": "user", "content": "first?"}, {"role": "assistant", "content": "one"}]
    TurnFactory(conversation=conversation, seq=1, question="first?", answer="one", transcript=transcript)
    TurnFactory(conversation=conversation, seq=2, question="second?", answer="half an answer")
    TurnFactory(conversation=conversation, seq=3, question="unanswered?", answer="")
    fourth = TurnFactory(conversation=conversation, seq=4, question="fourth?")

    with django_assert_num_queries(3):
        history = runner._history(fourth)
    assert [(m.role, m.content) for m in history] == [
        ("user", "first?"),
        ("assistant", "one"),
        ("user", "second?"),
        ("assistant", "half an answer"),
        ("user", "unanswered?"),
    ]


def test_a_follow_up_turn_reuses_the_pooled_server_and_carries_the_history(alice: User) -> None:
    conversation, first = _run(alice, WEATHER)
    second = turn_start(conversation=conversation, question="And in Paris today?", dispatch=False)

    turn_run(turn_id=second.pk)
    second.refresh_from_db()

    assert second.status == Turn.Status.DONE
    assert gateway.spawn_count(demo_server_ensure().pk) == 1
    connect = Step.objects.get(turn=second, kind="connect")
    assert "reused pooled session #1" in connect.text
    assert not Exchange.objects.filter(turn=second, label="initialize").exists()
    request = json.loads(Exchange.objects.filter(turn=second, channel="llm").order_by("seq")[0].request_body)
    roles = [m["role"] for m in request["messages"]]
    assert roles == ["user", "assistant", "tool", "assistant", "user"]
    assert request["messages"][0]["content"] == WEATHER


@pytest.mark.parametrize(
    ("marker", "refusal"),
    [
        ("[demo:unknown-tool]", "not sent: unknown tool"),
        ("[demo:malformed-json]", "not sent: the arguments for"),
        ("[demo:missing-argument]", "not sent: invalid arguments"),
    ],
)
def test_a_bad_call_is_refused_explained_and_repaired(alice: User, marker: str, refusal: str) -> None:
    _, turn = _run(alice, f"{WEATHER} {marker}")

    assert turn.status == Turn.Status.DONE
    first, second = _tool_steps(turn)
    assert first.status == "error" and first.error.startswith(refusal)
    assert not first.exchanges.exists()  # nothing reached the server
    assert second.status == "ok" and second.result is not None
    decide = Step.objects.filter(turn=turn, kind="decide").order_by("seq").first()
    assert decide is not None and decide.calls[0]["valid"] is False


def test_a_model_endpoint_error_ends_the_turn_with_the_response_kept(alice: User) -> None:
    _, turn = _run(alice, f"{WEATHER} [demo:http-500]")

    assert turn.status == Turn.Status.FAILED
    assert "500" in turn.error
    assert _rows(turn) == ["connect", "error"]
    error = Step.objects.get(turn=turn, kind="error")
    exchange = error.exchanges.get()
    assert exchange.status == "500" and "error" in json.loads(exchange.response_body)
    assert Step.objects.get(turn=turn, kind="connect").exchanges.filter(label="tools/list").exists()


def test_a_server_that_crashes_mid_call_is_explained_and_respawned_next_turn(
    alice: User, broken_server: McpServer
) -> None:
    conversation, turn = _run(
        alice, "Run the crash tool", [broken_server], tool_choice="named", tool_choice_name="broken/crash"
    )

    assert turn.status == Turn.Status.DONE  # the model was told, and answered
    crash, retry = _tool_steps(turn)  # the demo model retries once after an error result
    assert crash.status == "error" and "closed the connection" in crash.error
    assert crash.exchanges.filter(label="stderr", response_body__contains="crashing on purpose").exists()
    assert crash.exchanges.get(label="tools/call").status == "no response"
    assert "respawned the server (session #2) because the previous session died" in retry.diagnostics[0]
    assert retry.exchanges.filter(label="initialize").exists()

    again = turn_start(conversation=conversation, question="Echo hello", dispatch=False)
    turn_run(turn_id=again.pk)
    connect = Step.objects.get(turn=again, kind="connect")
    assert "respawned (session #3)" in connect.text
    assert connect.exchanges.filter(label="initialize").exists()


def test_a_server_that_hangs_past_its_timeout_is_cancelled_and_explained(
    alice: User, broken_server: McpServer
) -> None:
    _, turn = _run(
        alice, "Run the hang tool", [broken_server], tool_choice="named", tool_choice_name="broken/hang"
    )

    assert turn.status == Turn.Status.DONE
    hang = _tool_steps(turn)[0]
    assert hang.status == "error" and "timed out" in hang.error
    assert hang.exchanges.filter(label="notifications/cancelled").exists()


def test_a_tool_error_result_goes_back_to_the_model(alice: User, broken_server: McpServer) -> None:
    _, turn = _run(
        alice, "Run the fail tool", [broken_server], tool_choice="named", tool_choice_name="broken/fail"
    )

    assert turn.status == Turn.Status.DONE
    fail = _tool_steps(turn)[0]
    assert fail.is_error and fail.result["isError"] is True
    assert "the fail tool always fails" in turn.transcript[2]["content"]


def test_a_server_that_cannot_start_leaves_a_connect_error_and_the_turn_goes_on(alice: User) -> None:
    missing = McpServer.objects.create(
        name="missing", transport="stdio", command="/nonexistent/mcp-server", allow_non_staff_spawn=True
    )

    _, turn = _run(alice, WEATHER, [demo_server_ensure(), missing])

    assert turn.status == Turn.Status.DONE
    connect = Step.objects.get(turn=turn, kind="connect")
    assert connect.status == "error"
    assert any("missing: could not connect" in problem for problem in connect.diagnostics)


def test_a_missing_api_key_fails_the_turn_before_any_model_call(alice: User) -> None:
    profile = ModelProfile.objects.create(name="real", model="gpt-x", api_key_env="INSPECTOR_TEST_UNSET_KEY")
    conversation, turn = conversation_start(
        owner=alice, model_profile=profile, question=WEATHER, servers=[demo_server_ensure()], dispatch=False
    )

    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()

    assert turn.status == Turn.Status.FAILED
    assert "INSPECTOR_TEST_UNSET_KEY is not set" in turn.error
    assert not Exchange.objects.filter(turn=turn, channel="llm").exists()


def test_a_named_tool_that_is_not_offered_fails_the_turn_clearly(alice: User) -> None:
    _, turn = _run(alice, WEATHER, tool_choice="named", tool_choice_name="demo/no_such_tool")

    assert turn.status == Turn.Status.FAILED
    assert "demo/no_such_tool" in turn.error


def test_no_api_key_or_authorization_header_is_ever_stored(alice: User) -> None:
    _run(alice, WEATHER)

    key = settings.DEMO_MODEL_API_KEY
    for exchange in Exchange.objects.all():
        stored = json.dumps(
            [
                exchange.request_headers,
                exchange.request_body,
                exchange.response_headers,
                exchange.response_body,
            ]
        )
        assert key not in stored
        assert exchange.request_headers.get("authorization") in (None, "••••••")


@pytest.fixture
def tool_steps_refused() -> Iterator[None]:
    """The database refuses every tool step (as a full disk or a broken constraint would)."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            CREATE FUNCTION refuse_tool_step() RETURNS trigger LANGUAGE plpgsql AS $$
            BEGIN RAISE EXCEPTION 'no room for tool steps'; END $$;
            CREATE TRIGGER refuse_tool_step BEFORE INSERT ON conversations_step
            FOR EACH ROW WHEN (NEW.kind = 'tool') EXECUTE FUNCTION refuse_tool_step();
            """
        )
    yield
    with connection.cursor() as cursor:
        cursor.execute(
            "DROP TRIGGER refuse_tool_step ON conversations_step; DROP FUNCTION refuse_tool_step()"
        )


@pytest.mark.postgres
def test_a_step_the_database_refuses_fails_the_turn_with_the_reason(
    alice: User, tool_steps_refused: None
) -> None:
    _, turn = _run(alice, WEATHER)

    assert turn.status == "failed"
    assert turn.error.startswith("the database failed") and "no room for tool steps" in turn.error
    assert _rows(turn)[-1] == "error"
    last = Step.objects.filter(turn=turn).order_by("seq").last()
    assert last is not None and last.title == "the database failed"
    assert last.error.startswith("ProgrammingError: no room for tool steps")
    assert not Step.objects.filter(turn=turn, kind="tool").exists()
