"""What the conversation list shows of a turn, summarized when the turn is sealed: the same
tokens and tools the list read from the turn's steps before, for sealed turns, turns without a
summary and both in one conversation; a sealed turn's steps are not read for the list."""

from __future__ import annotations

import json
from io import StringIO
from typing import Any

import pytest
from django.core.management import call_command
from django.db import connection
from django.db.models import JSONField, Value
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conversations import selectors
from conversations.models import Conversation, Step, Turn
from conversations.record.integrity import turn_seal
from conversations.record.summaries import step_tokens, summary_extended, turn_summary
from conversations.record.verification import conversation_verify
from conversations.selectors import ConversationFilters, conversation_rows, conversation_search, tool_label
from tests.factories import ConversationFactory, McpServerFactory, StepFactory, TurnFactory, UserFactory

pytestmark = pytest.mark.django_db

USAGES: list[Any] = [
    {"total_tokens": 12},
    {"total_tokens": "12"},
    {"total_tokens": "12a"},
    {"total_tokens": " 12"},
    {"total_tokens": "１２"},  # noqa: RUF001 — full-width digits are not ASCII digits
    {"total_tokens": -3},
    {"total_tokens": 1.5},
    {"total_tokens": None},
    {"total_tokens": {"n": 1}},
    {"total_tokens": 2**62},
    {"total_tokens": "12\n"},
    {"totalTokenCount": 7},
    {"total_tokens": "x", "totalTokenCount": 7},
    {"input_tokens": 3, "output_tokens": 4},
    {"input_tokens": 3},
    {"input_tokens": "3", "output_tokens": 4, "total_tokens": "nope"},
    {},
    [],
    "text",
    None,
]
# Where SQLite's JSON reads a value otherwise than PostgreSQL (a bool is the integer 1 there);
# the Python twin follows PostgreSQL.
POSTGRES_ONLY: list[Any] = [{"total_tokens": True}]


def test_a_models_usage_counts_as_the_providers_report_it() -> None:
    assert [step_tokens(usage) for usage in USAGES] == [
        12, 12, None, None, None, None, None, None, None, 2**62, None, 7, 7, 7, None, 7, None, None, None, None,
    ]  # fmt: skip
    assert [step_tokens(usage) for usage in POSTGRES_ONLY] == [None]
    assert step_tokens({"total_tokens": 2**63}) is None  # past what the column holds


def test_the_python_count_is_the_lists_sql_count_for_every_usage() -> None:
    usages = USAGES + (POSTGRES_ONLY if connection.vendor == "postgresql" else [])
    turn = TurnFactory()
    # ``usage`` is never NULL: the step without one holds {}.
    steps = [StepFactory(turn=turn, usage=usage if usage is not None else {}) for usage in usages]

    counted = dict(
        Step.objects.filter(pk__in=[step.pk for step in steps])
        .annotate(counted=selectors.step_tokens_sql())
        .values_list("pk", "counted")
    )

    for step in steps:
        step.refresh_from_db()
        assert counted[step.pk] == step_tokens(step.usage), step.usage


def _steps_of(conversation: Conversation) -> list[Step]:
    return list(
        Step.objects.filter(turn__conversation=conversation)
        .select_related("server", "turn")
        .order_by("turn__seq", "seq")
    )


def _from_steps(conversation: Conversation) -> tuple[int | None, list[str]]:
    """What the list showed before summaries: summed and named from every step."""
    counts = [count for step in _steps_of(conversation) if (count := step_tokens(step.usage)) is not None]
    labels: list[str] = []
    for step in _steps_of(conversation):
        if step.kind == Step.Kind.TOOL:
            label = tool_label(step.server.name if step.server else step.server_name, step.tool_name)
            if label and label not in labels:
                labels.append(label)
    return (sum(counts) if counts else None), labels


def _turn_with_calls(conversation: Conversation, calls: list[tuple[Any, str]], usages: list[Any]) -> Turn:
    turn = TurnFactory(conversation=conversation)
    for usage in usages:
        decide = StepFactory(turn=turn, usage=usage)
        for server, tool in calls:
            StepFactory(
                turn=turn,
                parent=decide,
                kind=Step.Kind.TOOL,
                tool_name=tool,
                server=server,
                server_name=server.name if server else "gone",
            )
    return turn


def _listed(owner: Any, **filters: Any) -> dict[int, tuple[int | None, list[str]]]:
    found = list(conversation_search(user=owner, filters=ConversationFilters(**filters)))
    return {row.conversation.pk: (row.tokens, row.tools) for row in conversation_rows(conversations=found)}


def test_the_list_shows_the_same_tokens_and_tools_for_sealed_unsealed_and_mixed_turns() -> None:
    owner = UserFactory()
    weather, notes = McpServerFactory(name="weather"), McpServerFactory(name="notes")
    sealed, unsealed, mixed, quiet = (ConversationFactory(owner=owner) for _ in range(4))
    for conversation in (sealed, unsealed, mixed):
        _turn_with_calls(conversation, [(weather, "forecast"), (notes, "add")], [{"total_tokens": 10}, {}])
        _turn_with_calls(
            conversation,
            [(notes, "list"), (None, "orphan"), (weather, "forecast")],
            [{"input_tokens": 2, "output_tokens": 3}],
        )
    _turn_with_calls(quiet, [], [{}])  # no tokens reported, no tools called
    for turn in Turn.objects.filter(conversation__in=[sealed, quiet]):
        turn_seal(turn=turn)
    turn_seal(turn=Turn.objects.get(conversation=mixed, seq=2))

    shown = _listed(owner)

    assert Turn.objects.filter(tools_called__isnull=False).count() == 4
    for conversation in (sealed, unsealed, mixed, quiet):
        assert shown[conversation.pk] == _from_steps(conversation), conversation
    assert shown[sealed.pk] == (15, ["weather/forecast", "notes/add", "notes/list", "gone/orphan"])
    assert shown[quiet.pk] == (None, [])
    by_tokens = list(conversation_search(user=owner, filters=ConversationFilters(sort="-tokens")))
    assert [c.pk for c in by_tokens][-1] == quiet.pk  # no count sorts last
    assert {c.tokens for c in by_tokens[:3]} == {15}


def test_a_summarized_turn_names_its_servers_as_they_are_called_now() -> None:
    owner = UserFactory()
    weather = McpServerFactory(name="weather")
    conversation = ConversationFactory(owner=owner)
    turn_seal(turn=_turn_with_calls(conversation, [(weather, "forecast")], [{"total_tokens": 1}]))

    weather.name = "forecasts"
    weather.save()
    renamed, renamed_from_steps = _listed(owner)[conversation.pk], _from_steps(conversation)
    weather.delete()
    deleted = _listed(owner)[conversation.pk]

    assert renamed == (1, ["forecasts/forecast"]) == renamed_from_steps
    # A deleted server: the name the step kept (as the list shows it from the steps).
    assert deleted == (1, ["weather/forecast"]) == _from_steps(conversation)
    # Its steps no longer link to it; the summary keeps the old id, and the record is intact.
    assert conversation_verify(conversation=conversation).intact


def test_a_turns_summary_is_written_with_its_seal() -> None:
    conversation = ConversationFactory()
    weather = McpServerFactory(name="weather")
    turn = _turn_with_calls(
        conversation, [(weather, "forecast"), (weather, "forecast")], [{"total_tokens": 4}] * 2
    )
    assert turn.tools_called is None

    turn_seal(turn=turn)
    stored = Turn.objects.get(pk=turn.pk)

    assert (stored.usage_total, stored.tools_called) == (8, [[weather.pk, "weather", "forecast"]])
    assert (turn.usage_total, turn.tools_called) == (stored.usage_total, stored.tools_called)
    assert tuple(turn_summary(_steps_of(conversation))) == (8, [[weather.pk, "weather", "forecast"]])


def test_a_summary_that_is_not_what_the_seal_writes_is_read_without_failing() -> None:
    """A hand-edited or imported summary of the wrong shape shows what it can, never an error."""
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    TurnFactory(conversation=conversation, tools_called=[["x"], "y", [None, 3, "tool"], [1, "srv", 5]])

    assert _listed(owner)[conversation.pk] == (None, ["tool"])


def test_the_page_reads_no_step_of_a_sealed_turn_for_its_tools() -> None:
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    turn_seal(turn=_turn_with_calls(conversation, [(McpServerFactory(), "forecast")], [{"total_tokens": 1}]))
    found = list(conversation_search(user=owner, filters=ConversationFilters()))

    with CaptureQueriesContext(connection) as queries:
        conversation_rows(conversations=found)

    assert not [query["sql"] for query in queries if "conversations_step" in query["sql"]]


@pytest.mark.postgres
def test_on_postgresql_the_token_count_of_a_sealed_turn_reads_none_of_its_steps() -> None:
    """The list's token count asks a turn's steps only when it has no summary: for sealed turns
    the plan's scans of the step table never run."""
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    for _ in range(3):
        turn_seal(
            turn=_turn_with_calls(conversation, [(McpServerFactory(), "forecast")], [{"total_tokens": 2}] * 3)
        )
    query = conversation_search(user=owner, filters=ConversationFilters())
    sql, params = query.query.sql_with_params()

    with connection.cursor() as cursor:
        cursor.execute(f"EXPLAIN (ANALYZE, FORMAT JSON) {sql}", params)
        plan = cursor.fetchone()[0]
    plan = json.loads(plan) if isinstance(plan, str) else plan

    scans = [node for node in _nodes(plan[0]["Plan"]) if node.get("Relation Name") == "conversations_step"]
    assert scans, "the plan has no scan of the steps: the test would prove nothing"
    assert all(node["Actual Loops"] == 0 for node in scans)
    assert list(query)[0].tokens == 18


def _nodes(node: dict[str, Any]) -> list[dict[str, Any]]:
    return [node, *(found for child in node.get("Plans", []) for found in _nodes(child))]


def test_summarize_keeps_what_the_seal_would_for_ended_turns_that_have_none() -> None:
    conversation = ConversationFactory()
    weather = McpServerFactory(name="weather")
    ended = [
        _turn_with_calls(conversation, [(weather, "forecast"), (None, "orphan")], [{"total_tokens": n}])
        for n in (1, 2, 3)
    ]
    empty = TurnFactory(conversation=conversation)  # ended without a step
    running = TurnFactory(conversation=conversation, status=Turn.Status.RUNNING)
    StepFactory(turn=running, usage={"total_tokens": 9})
    sealed = _turn_with_calls(conversation, [(weather, "forecast")], [{"total_tokens": 5}])
    turn_seal(turn=sealed)
    Turn.objects.filter(pk=sealed.pk).update(usage_total=50)  # kept: it has a summary
    out = StringIO()

    call_command("summarize", "--batch", "2", stdout=out)
    again = StringIO()
    call_command("summarize", stdout=again)

    assert out.getvalue().strip() == "summarized 4 turn(s)"
    assert again.getvalue().strip() == "summarized 0 turn(s)"
    assert [Turn.objects.get(pk=turn.pk).usage_total for turn in ended] == [1, 2, 3]
    for turn in ended:
        stored = Turn.objects.get(pk=turn.pk)
        steps = Step.objects.filter(turn=turn).order_by("seq", "id")
        assert (stored.usage_total, stored.tools_called) == tuple(turn_summary(steps))
        assert stored.tools_called == [[weather.pk, "weather", "forecast"], [None, "gone", "orphan"]]
    assert (Turn.objects.get(pk=empty.pk).usage_total, Turn.objects.get(pk=empty.pk).tools_called) == (
        None,
        [],
    )
    assert Turn.objects.get(pk=running.pk).tools_called is None
    assert Turn.objects.get(pk=sealed.pk).usage_total == 50


@pytest.mark.parametrize(
    "edit",
    [{"usage_total": 1000}, {"tools_called": [[None, "other", "tool"]]}, {"tools_called": []}],
    ids=["tokens", "tools", "no tools"],
)
def test_a_summary_edited_in_the_database_breaks_verification(edit: dict[str, Any]) -> None:
    """The summary is made from the sealed steps: verification recomputes it, so an edit of the
    list's tokens or tools is found as an edit of the sealed record would be."""
    conversation = ConversationFactory()
    turn = _turn_with_calls(conversation, [(McpServerFactory(), "forecast")], [{"total_tokens": 7}])
    turn_seal(turn=turn)
    assert conversation_verify(conversation=conversation).intact

    Turn.objects.filter(pk=turn.pk).update(**edit)
    report = conversation_verify(conversation=conversation)

    assert not report.intact
    assert "summary in the conversation list" in report.reason
    assert (report.turn_seq, report.turn_id) == (turn.seq, turn.pk)


def test_a_sealed_turn_without_a_summary_still_verifies() -> None:
    conversation = ConversationFactory()
    turn = _turn_with_calls(conversation, [(McpServerFactory(), "forecast")], [{"total_tokens": 7}])
    turn_seal(turn=turn)
    Turn.objects.filter(pk=turn.pk).update(usage_total=None, tools_called=None)  # sealed before summaries

    assert conversation_verify(conversation=conversation).intact


def test_a_json_null_where_a_summary_goes_reads_the_steps_everywhere() -> None:
    """A JSON null put in by hand is no summary: the token total and the tools both come from the
    steps (the stored total is not shown), and the record verifies."""
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    turn = _turn_with_calls(
        conversation, [(McpServerFactory(name="weather"), "forecast")], [{"total_tokens": 7}]
    )
    turn_seal(turn=turn)
    Turn.objects.filter(pk=turn.pk).update(tools_called=Value(None, JSONField()), usage_total=999_999)

    assert _listed(owner)[conversation.pk] == (7, ["weather/forecast"]) == _from_steps(conversation)
    assert conversation_verify(conversation=conversation).intact


def test_ids_no_row_can_have_are_read_as_no_server() -> None:
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner)
    TurnFactory(
        conversation=conversation, tools_called=[[2**63, "big", "a"], [True, "flag", "b"], [-1, "neg", "c"]]
    )

    assert _listed(owner)[conversation.pk] == (None, ["big/a", "flag/b", "neg/c"])


def test_the_list_page_shows_a_summary_with_a_lone_surrogate(client: Client) -> None:
    """SQLite stores a JSON text PostgreSQL refuses (a lone surrogate escape): the page still
    renders, the character made carriable as every shown JSON value is."""
    owner = UserFactory()
    conversation = ConversationFactory(owner=owner, title="odd")
    turn = TurnFactory(conversation=conversation)
    if connection.vendor == "sqlite":
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE conversations_turn SET tools_called = %s WHERE id = %s",
                ['[[null, "x", "\\ud800"]]', turn.pk],
            )
    else:
        Turn.objects.filter(pk=turn.pk).update(tools_called=[[None, "x", "tool"]])
    client.force_login(owner)

    response = client.get(reverse("inspector-conversations"), HTTP_HOST="127.0.0.1")

    assert response.status_code == 200
    assert "x/" in response.content.decode()


@pytest.mark.parametrize(
    "kept",
    [
        [[[1], "weather", "forecast"]],
        [[{"id": 1}, "weather", "forecast"]],
        [["x", ["weather"], "forecast"]],
        "x",
    ],
    ids=["list id", "object id", "list name", "not a list"],
)
def test_a_summary_of_another_shape_is_reported_broken_not_raised(kept: Any) -> None:
    conversation = ConversationFactory()
    turn = _turn_with_calls(
        conversation, [(McpServerFactory(name="weather"), "forecast")], [{"total_tokens": 7}]
    )
    turn_seal(turn=turn)
    Turn.objects.filter(pk=turn.pk).update(tools_called=kept)

    report = conversation_verify(conversation=conversation)

    assert not report.intact
    assert "summary in the conversation list" in report.reason


def _step(kind: str, usage: Any = None, tool: str = "") -> Step:
    return Step(kind=kind, usage=usage, server_name="time" if tool else "", tool_name=tool)


@pytest.mark.parametrize("split", range(6))
def test_a_summary_extended_by_later_steps_is_the_summary_of_all_of_them(split: int) -> None:
    steps = [
        _step("connect"),
        _step("decide", {"total_tokens": 10}),
        _step("tool", tool="now"),
        _step("decide", {"total_tokens": 2**63 - 5}),
        _step("tool", tool="now"),
        _step("tool", tool="later"),
    ]
    before, after = steps[:split], steps[split:]
    previous = turn_summary(before) if before else None
    extended = summary_extended(previous, after)
    reported = any(step_tokens(step.usage) is not None for step in after)
    if previous is not None and previous.usage_total is None and reported:
        assert extended is None  # no tokens so far: none reported, or past the column
    else:
        assert extended == turn_summary(steps)
