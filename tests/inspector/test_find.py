"""Finding conversations: every filter, full text over questions, answers and raw payloads,
sorting, pagination that keeps the filters, and the one access rule underneath.

The full-text path here is the SQLite fallback (``icontains``); PostgreSQL's full-text search
runs in ``tests/conversations/test_search_postgres.py``.
"""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse
from django.utils import timezone

from conversations.models import Conversation, Step, Team, Turn
from conversations.selectors import ERROR_CLASSES, ConversationFilters, conversation_search
from tests.factories import (
    ConversationFactory,
    ExchangeFactory,
    McpServerFactory,
    ModelProfileFactory,
    StepFactory,
    TurnFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

LIST_URL = reverse("inspector-conversations")


@pytest.fixture
def alice() -> User:
    return UserFactory(username="alice")


@pytest.fixture
def bob() -> User:
    return UserFactory(username="bob")


@pytest.fixture
def alice_client(client: Client, alice: User) -> Client:
    client.force_login(alice)
    return client


def found(user: User, **filters: Any) -> list[str]:
    """The titles ``user`` finds with ``filters``, in the order the list shows them."""
    return [c.title for c in conversation_search(user=user, filters=ConversationFilters(**filters))]


def conversation(owner: User, title: str, **fields: Any) -> Conversation:
    return ConversationFactory(owner=owner, title=title, **fields)


def tool_call(turn: Turn, tool: str, *, server: Any = None, **fields: Any) -> Step:
    """A decide step and, under it, a call of ``tool``."""
    decide = StepFactory(turn=turn, title=f"calls {tool}")
    return StepFactory(
        turn=turn,
        parent=decide,
        kind=Step.Kind.TOOL,
        title=f"{server.name}/{tool}" if server else tool,
        tool_name=tool,
        server=server,
        **fields,
    )


# --- each filter -----------------------------------------------------------------------------


def test_the_server_filter_finds_conversations_with_that_server_or_its_recorded_traffic(alice: User) -> None:
    demo, other = McpServerFactory(name="demo"), McpServerFactory(name="other")
    conversation(alice, "configured with demo", servers=[demo])
    conversation(alice, "configured with other", servers=[other])
    imported = conversation(alice, "imported demo traffic", imported_meta={"original_id": "x"})
    ExchangeFactory(step=StepFactory(turn=TurnFactory(conversation=imported)), mcp=True, server_name="demo")

    assert found(alice, server="demo") == ["imported demo traffic", "configured with demo"]


def test_the_tool_filter_finds_any_call_of_that_tool_by_name_or_as_server_slash_tool(alice: User) -> None:
    demo = McpServerFactory(name="demo")
    forecast = conversation(alice, "forecast")
    tool_call(TurnFactory(conversation=forecast), "get_weather_forecast", server=demo)
    calculator = conversation(alice, "calculator")
    tool_call(TurnFactory(conversation=calculator), "calculate", server=demo)
    conversation(alice, "no tools")

    assert found(alice, tool="get_weather_forecast") == ["forecast"]
    assert found(alice, tool="demo/calculate") == ["calculator"]
    assert found(alice, tool="get_weather") == []


def test_the_model_filter_finds_conversations_of_that_profile(alice: User) -> None:
    conversation(alice, "on gpt", model_profile=ModelProfileFactory(name="gpt"))
    conversation(alice, "on the demo")

    assert found(alice, model_profile="gpt") == ["on gpt"]


def test_the_paradigm_filter(alice: User) -> None:
    conversation(alice, "xml", paradigm="prompt_xml")
    conversation(alice, "native", paradigm="native")

    assert found(alice, paradigm="prompt_xml") == ["xml"]


def test_the_status_filter_looks_at_the_latest_turn(alice: User) -> None:
    recovered = conversation(alice, "failed, then answered")
    TurnFactory(conversation=recovered, status=Turn.Status.FAILED)
    TurnFactory(conversation=recovered, status=Turn.Status.DONE)
    broken = conversation(alice, "answered, then failed")
    TurnFactory(conversation=broken, status=Turn.Status.DONE)
    TurnFactory(conversation=broken, status=Turn.Status.FAILED)

    assert found(alice, status="done") == ["failed, then answered"]
    assert found(alice, status="failed") == ["answered, then failed"]


def _model_error(turn: Turn) -> None:
    StepFactory(
        turn=turn, kind=Step.Kind.ERROR, status="error", title="ask the model failed", error="HTTP 500"
    )


def _invalid_call(turn: Turn) -> None:
    tool_call(turn, "launch", status="error", is_error=True, error="not sent: unknown tool 'launch'")


def _tool_error(turn: Turn) -> None:
    tool_call(turn, "calculate", status="error", is_error=True, result={"isError": True, "content": []})


def _server_crash(turn: Turn) -> None:
    tool_call(
        turn,
        "crash",
        status="error",
        is_error=True,
        error="broken closed the connection during the call (ClosedResourceError: )",
    )


def _run_stopped(turn: Turn) -> None:
    StepFactory(turn=turn, kind=Step.Kind.ERROR, status="error", title="step limit reached")


ERROR_BUILDERS = {
    "model": _model_error,
    "invalid_call": _invalid_call,
    "tool": _tool_error,
    "server": _server_crash,
    "run": _run_stopped,
}


def test_every_error_class_has_a_case_here() -> None:
    assert set(ERROR_BUILDERS) == set(ERROR_CLASSES)


@pytest.mark.parametrize("error", list(ERROR_BUILDERS))
def test_the_error_filter_finds_exactly_the_conversations_with_that_class_of_error(
    alice: User, error: str
) -> None:
    for name, build in ERROR_BUILDERS.items():
        build(TurnFactory(conversation=conversation(alice, name)))
    tool_call(TurnFactory(conversation=conversation(alice, "all fine")), "calculate")

    assert found(alice, error=error) == [error]


def test_a_server_that_failed_to_connect_is_a_server_error(alice: User) -> None:
    turn = TurnFactory(conversation=conversation(alice, "unreachable"))
    StepFactory(turn=turn, kind=Step.Kind.CONNECT, status="error", text="demo: could not connect to demo")

    assert found(alice, error="server") == ["unreachable"]


def test_the_owner_filter_narrows_what_the_user_may_see(alice: User, bob: User) -> None:
    Team.objects.create(name="platform").members.add(alice, bob)
    conversation(alice, "alice's")
    conversation(bob, "bob's")

    assert found(alice, owner="bob") == ["bob's"]
    assert found(alice, owner="alice") == ["alice's"]


def test_the_date_range_is_inclusive(alice: User) -> None:
    for day in (1, 2, 3, 4):
        conversation(alice, f"day {day}", created_at=datetime(2026, 3, day, 12, tzinfo=UTC))

    assert found(alice, created_from=datetime(2026, 3, 2).date(), created_to=datetime(2026, 3, 3).date()) == [
        "day 3",
        "day 2",
    ]
    assert found(alice, created_from=datetime(2026, 3, 4).date()) == ["day 4"]
    assert found(alice, created_to=datetime(2026, 3, 1).date()) == ["day 1"]


# --- full text -------------------------------------------------------------------------------


def test_text_is_found_in_questions_answers_and_raw_request_and_response_bodies(alice: User) -> None:
    TurnFactory(conversation=conversation(alice, "asked"), question="Is it raining in Reykjavik?")
    TurnFactory(conversation=conversation(alice, "answered"), answer="Snow expected in Tromsø.")
    request = StepFactory(turn=TurnFactory(conversation=conversation(alice, "sent")))
    ExchangeFactory(step=request, request_body='{"params": {"arguments": {"city": "Ouagadougou"}}}')
    response = StepFactory(turn=TurnFactory(conversation=conversation(alice, "received")))
    ExchangeFactory(step=response, mcp=True, response_body='{"result": {"text": "Windhoek: 31 C"}}')

    assert found(alice, q="reykjavik") == ["asked"]
    assert found(alice, q="Tromsø") == ["answered"]
    # Raw bodies are searched when asked for (``scope=raw``), not by default.
    assert found(alice, q="Ouagadougou") == []
    assert found(alice, q="Ouagadougou", scope=("raw",)) == ["sent"]
    assert found(alice, q="windhoek", scope=("raw",)) == ["received"]
    assert found(alice, q="Atlantis") == []


def test_a_streamed_reply_is_found_by_what_it_assembled_to_where_its_events_cut_a_word(alice: User) -> None:
    step = StepFactory(turn=TurnFactory(conversation=conversation(alice, "streamed")))
    events = 'data: {"choices": [{"delta": {"content": "Ouaga"}}]}\n\ndata: {"choices": [{"delta": {"content": "dougou"}}]}\n\n'
    ExchangeFactory(step=step, response_body=events, response_search="Ouagadougou")

    # (The SQLite fallback also matches the raw events; PostgreSQL's index reads the assembled
    # text in their place: tests/conversations/test_search_postgres.py.)
    assert found(alice, q="ouagadougou", scope=("raw",)) == ["streamed"]


def test_every_word_must_occur_and_a_quoted_phrase_stays_together(alice: User) -> None:
    TurnFactory(conversation=conversation(alice, "paris rain"), question="Rain in Paris tomorrow?")
    TurnFactory(conversation=conversation(alice, "paris sun"), question="Sun in Paris tomorrow?")

    assert found(alice, q="paris rain") == ["paris rain"]
    assert found(alice, q='"paris tomorrow"') == ["paris sun", "paris rain"]
    assert found(alice, q='"tomorrow paris"') == []


def test_a_conversation_matching_in_many_places_is_listed_once(alice: User) -> None:
    chatty = conversation(alice, "chatty")
    for _ in range(3):
        turn = TurnFactory(conversation=chatty, question="Beijing?", answer="Beijing: sunny")
        step = StepFactory(turn=turn)
        ExchangeFactory(step=step, request_body="Beijing", response_body="Beijing")
        ExchangeFactory(step=step, mcp=True, request_body="Beijing", response_body="Beijing")
    demo = McpServerFactory(name="demo")
    chatty.servers.set([demo])
    tool_call(TurnFactory(conversation=chatty), "get_weather_forecast", server=demo)
    tool_call(TurnFactory(conversation=chatty), "get_weather_forecast", server=demo)

    results = conversation_search(
        user=alice, filters=ConversationFilters(q="beijing", server="demo", tool="get_weather_forecast")
    )

    assert [c.title for c in results] == ["chatty"]
    assert results.count() == 1


def test_bob_cannot_find_alices_conversations(alice: User, bob: User) -> None:
    TurnFactory(conversation=conversation(alice, "alice's secret"), question="Where is the treasure?")

    assert found(bob, q="treasure") == []
    assert found(bob, owner="alice") == []
    assert found(alice, q="treasure") == ["alice's secret"]


# --- sorting ---------------------------------------------------------------------------------


def _ran_for(title: str, owner: User, seconds: list[float], created: datetime) -> Conversation:
    item = conversation(owner, title, created_at=created)
    start = timezone.now()
    for length in seconds:
        TurnFactory(conversation=item, started_at=start, finished_at=start + timedelta(seconds=length))
    return item


def test_sorting_by_duration_sums_the_turns_and_puts_unknown_durations_last(alice: User) -> None:
    now = timezone.now()
    _ran_for("short", alice, [1.0], now)
    _ran_for("long", alice, [2.0, 3.5], now - timedelta(hours=1))
    _ran_for("middle", alice, [4.0], now - timedelta(hours=2))
    TurnFactory(
        conversation=conversation(alice, "queued", created_at=now - timedelta(hours=3)), status="queued"
    )

    assert found(alice, sort="-duration") == ["long", "middle", "short", "queued"]
    assert found(alice, sort="duration") == ["short", "middle", "long", "queued"]


def test_sorting_by_tokens_sums_what_providers_reported(alice: User) -> None:
    openai = TurnFactory(conversation=conversation(alice, "openai"))
    StepFactory(turn=openai, usage={"prompt_tokens": 90, "completion_tokens": 10, "total_tokens": 100})
    StepFactory(turn=openai, usage={"total_tokens": 250})
    anthropic = TurnFactory(conversation=conversation(alice, "anthropic"))
    StepFactory(turn=anthropic, usage={"input_tokens": 200, "output_tokens": 20})
    gemini = TurnFactory(conversation=conversation(alice, "gemini"))
    StepFactory(turn=gemini, usage={"totalTokenCount": 5})
    odd = TurnFactory(conversation=conversation(alice, "unreported"))
    StepFactory(turn=odd, usage={"total_tokens": "many"})

    assert found(alice, sort="-tokens") == ["openai", "anthropic", "gemini", "unreported"]
    assert found(alice, sort="tokens") == ["gemini", "anthropic", "openai", "unreported"]
    tokens = {c.title: c.tokens for c in conversation_search(user=alice, filters=ConversationFilters())}
    assert tokens == {"openai": 350, "anthropic": 220, "gemini": 5, "unreported": None}


def test_sorting_by_date_both_ways(alice: User) -> None:
    now = timezone.now()
    conversation(alice, "older", created_at=now - timedelta(days=1))
    conversation(alice, "newer", created_at=now)

    assert found(alice) == ["newer", "older"]
    assert found(alice, sort="created") == ["older", "newer"]


def test_an_unknown_sort_or_error_class_is_refused(alice: User) -> None:
    with pytest.raises(ValueError, match="sort"):
        found(alice, sort="title")
    with pytest.raises(ValueError, match="error class"):
        found(alice, error="cosmic rays")


# --- the list page ---------------------------------------------------------------------------


def test_the_list_filters_from_the_query_string_and_shows_each_rows_measures(
    alice_client: Client, alice: User
) -> None:
    demo = McpServerFactory(name="demo")
    item = conversation(alice, "Weather in Beijing", paradigm="prompt_json", servers=[demo])
    start = timezone.now()
    turn = TurnFactory(conversation=item, started_at=start, finished_at=start + timedelta(seconds=2.5))
    step = tool_call(turn, "get_weather_forecast", server=demo)
    assert step.parent is not None
    Step.objects.filter(pk=step.parent.pk).update(usage={"total_tokens": 1234})
    conversation(alice, "Something else")

    response = alice_client.get(LIST_URL, {"tool": "get_weather_forecast", "paradigm": "prompt_json"})

    assert response.status_code == 200
    html = response.content.decode()
    assert "Weather in Beijing" in html and "Something else" not in html
    assert "1 conversation matches" in html
    assert "demo/get_weather_forecast" in html
    assert "Prompt-structured output, JSON" in html or "prompt_json" in html
    assert ">done</span>" in html
    assert "2.5 s" in html
    assert "1,234" in html
    assert 'value="get_weather_forecast"' in html  # the form shows what was asked


def test_pagination_keeps_the_filters_and_the_sort(alice_client: Client, alice: User) -> None:
    for n in range(27):
        TurnFactory(conversation=conversation(alice, f"match {n:02d}"), question="about zebras")
    for n in range(5):
        conversation(alice, f"other {n}")

    first = alice_client.get(LIST_URL, {"q": "zebras", "sort": "created"})
    html = first.content.decode()
    second = alice_client.get(LIST_URL, {"q": "zebras", "sort": "created", "page": 2})

    assert "?q=zebras&amp;sort=created&amp;page=2" in html
    assert [row.conversation.title for row in first.context["rows"]][:2] == ["match 00", "match 01"]
    assert [row.conversation.title for row in second.context["rows"]] == ["match 25", "match 26"]


def test_sort_links_keep_the_filters_and_drop_the_page(alice_client: Client, alice: User) -> None:
    TurnFactory(conversation=conversation(alice, "one"), question="one")

    html = alice_client.get(LIST_URL, {"q": "one", "page": "1", "sort": "-tokens"}).content.decode()

    assert 'href="?q=one&amp;sort=tokens"' in html  # the current column flips
    assert 'href="?q=one&amp;sort=-duration"' in html
    assert 'href="?q=one&amp;sort=-created"' in html


def test_a_bad_filter_is_a_400_that_says_what_is_wrong(alice_client: Client, alice: User) -> None:
    conversation(alice, "one")

    response = alice_client.get(LIST_URL, {"created_from": "2026-05-02", "created_to": "2026-05-01"})
    unknown = alice_client.get(LIST_URL, {"error": "cosmic rays"})

    assert response.status_code == 400
    assert "The end date is before the start date." in response.content.decode()
    assert unknown.status_code == 400
    assert "Select a valid choice" in unknown.content.decode()


def test_hostile_titles_and_tool_names_are_escaped_in_the_list(alice_client: Client, alice: User) -> None:
    item = conversation(alice, "<script>alert(1)</script>")
    tool_call(TurnFactory(conversation=item), "<img src=x onerror=alert(2)>")

    html = alice_client.get(LIST_URL).content.decode()
    searched = alice_client.get(LIST_URL, {"q": '"><script>alert(3)</script>'}).content.decode()

    assert "<script>alert(1)" not in html and "&lt;script&gt;alert(1)" in html
    assert "<img src=x" not in html and "&lt;img src=x onerror=alert(2)&gt;" in html
    assert "<script>alert(3)" not in searched and "&lt;script&gt;alert(3)" in searched
