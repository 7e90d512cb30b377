"""Teaching mode on the pages: the per-user switch, the notes in every row, the step-through, the
model profiles page with its reset, and the site's own 404. Real runs: the demo model
in-process, the demo MCP server over stdio."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.db import connection
from django.template.loader import render_to_string
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conversations import presentation
from conversations.capabilities import CAPABILITY_RESET_ACTION
from conversations.loop.paradigms import PARADIGMS
from conversations.models import (
    AuditEvent,
    Exchange,
    LearnedCapability,
    ModelProfile,
    Step,
    Turn,
    UserPreference,
)
from conversations.runner import turn_run
from conversations.services import (
    comparison_providers_start,
    comparison_start,
    conversation_start,
    demo_profile_ensure,
)
from inspector.preferences import preference_set
from inspector.templatetags.inspector_tags import waterfall
from inspector.waterfall import turn_waterfall
from servers import gateway
from servers.models import Operation
from servers.services import demo_server_ensure, operation_start
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _signed_in(user: Any) -> Client:
    client = Client()
    client.force_login(user)
    return client


def _weather_turn(owner: Any, **options: Any) -> Turn:
    _, turn = conversation_start(
        owner=owner,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
        **options,
    )
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    return turn


def test_teaching_mode_is_remembered_per_user() -> None:
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    as_alice = _signed_in(alice)

    response = as_alice.post(reverse("inspector-preferences"), {"teaching": "on", "next": "/compare/"})

    assert response.status_code == 302
    assert response["Location"] == "/compare/"
    assert 'data-teaching="on"' in as_alice.get("/").content.decode()
    assert 'data-teaching="off"' in _signed_in(bob).get("/").content.decode()
    assert UserPreference.objects.get(user=alice).teaching is True


def test_the_switch_answers_a_script_with_204_and_refuses_what_it_does_not_know() -> None:
    alice = UserFactory(username="alice")
    as_alice = _signed_in(alice)

    fetched = as_alice.post(
        reverse("inspector-preferences"), {"theme": "dark"}, HTTP_X_REQUESTED_WITH="fetch"
    )
    bad = as_alice.post(reverse("inspector-preferences"), {"theme": "purple"})
    elsewhere = as_alice.post(
        reverse("inspector-preferences"), {"teaching": "off", "next": "https://evil.example/"}
    )

    assert fetched.status_code == 204
    assert 'data-theme="dark"' in as_alice.get("/").content.decode()
    assert bad.status_code == 400
    assert elsewhere["Location"] == "/"


def test_every_row_names_its_roles_explains_its_fields_and_marks_select_and_execute() -> None:
    alice = UserFactory(username="alice")
    preference_set(user=alice, teaching=True)
    turn = _weather_turn(alice)
    assert turn.status == "done", turn.error

    page = _signed_in(alice).get(reverse("inspector-conversation", args=[turn.conversation.public_id]))
    text = page.content.decode()

    assert re.search(r'data-sender="Host" data-receiver="Model"', text)
    assert re.search(r'data-sender="Client" data-receiver="Server"', text)
    assert "<code>tool_calls</code>" in text
    assert "<code>jsonrpc</code>" in text
    assert "<code>isError</code>" in text or "<code>content</code>" in text
    assert 'class="mark-select">SELECT<' in text
    assert 'class="mark-execute">EXECUTE<' in text
    assert "(no note yet)" not in text
    # The tool_choice each model request sent, on the row itself.
    assert re.search(r'class="tool-choice-sent"[^>]*>tool_choice <code>auto</code>', text)


@pytest.mark.parametrize("mode", ["auto", "required", "none", "named"])
def test_every_model_step_shows_the_tool_choice_in_every_paradigm(mode: str) -> None:
    alice = UserFactory(username="alice")
    comparison, turns = comparison_start(
        owner=alice,
        question=WEATHER,
        runs=[(demo_profile_ensure(), paradigm) for paradigm in PARADIGMS if paradigm != "auto"],
        servers=[demo_server_ensure()],
        tool_choice=mode,
        tool_choice_name="demo/get_weather_forecast" if mode == "named" else "",
        dispatch=False,
    )
    as_alice = _signed_in(alice)
    for turn in turns:
        turn_run(turn_id=turn.pk)
        text = html.unescape(
            as_alice.get(
                reverse("inspector-conversation", args=[turn.conversation.public_id])
            ).content.decode()
        )
        paradigm = turn.conversation.paradigm
        calls = turn.steps.filter(kind__in=["decide", "answer"], exchanges__channel="llm").distinct().count()
        shown = re.findall(r'class="tool-choice-sent"[^>]*>tool_choice <code>([^<]*)</code>', text)
        assert calls and len(shown) == calls, (paradigm, shown)
        if paradigm == "native":
            continue
        # Not a field of the request: the mode it ran under, which the prompt (or schema) says in
        # words: the turn's until its first call, then auto (a forced choice is relaxed).
        first_call = min((s.seq for s in turn.steps.filter(kind="tool")), default=None)
        rows = list(turn.steps.filter(kind__in=["decide", "answer"], exchanges__channel="llm").distinct())
        expected = [
            "auto"
            if first_call is not None and row.seq > first_call and mode in {"required", "named"}
            else mode
            for row in sorted(rows, key=lambda row: row.seq)
        ]
        assert all("in words" in value for value in shown), (paradigm, shown)
        assert [value.split(" ")[0] for value in shown] == expected, (paradigm, shown)


@pytest.mark.parametrize(
    ("marker", "rungs"),
    [
        ("", ["auto"]),
        (" [demo:no-native-tools]", ["auto", "auto — not a field: the prompt says it in words"]),
    ],
    ids=["native", "after a fallback"],
)
def test_every_model_step_of_auto_shows_the_tool_choice_of_the_rung_it_ran(
    marker: str, rungs: list[str]
) -> None:
    alice = UserFactory(username="alice")
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER + marker,
        servers=[demo_server_ensure()],
        paradigm="auto",
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)

    text = html.unescape(
        _signed_in(alice)
        .get(reverse("inspector-conversation", args=[conversation.public_id]))
        .content.decode()
    )

    calls = turn.steps.filter(exchanges__channel="llm").distinct().count()
    shown = re.findall(r'class="tool-choice-sent"[^>]*>tool_choice <code>([^<]*)</code>', text)
    assert calls >= 2 and len(shown) == calls, shown
    # native sends the field; after the refusal, structured says it in its prompt instead.
    assert list(dict.fromkeys(shown)) == rungs


def test_the_step_through_walks_one_turn_from_the_prompt_to_the_answer() -> None:
    alice = UserFactory(username="alice")
    turn = _weather_turn(alice)
    url = reverse("inspector-turn-walk", args=[turn.conversation.public_id, turn.pk])
    as_alice = _signed_in(alice)

    first = as_alice.get(url).content.decode()
    total = int(re.search(r"slide 1 of (\d+)", first).group(1))  # type: ignore[union-attr]
    layers = [
        re.search(r'data-layer="(\w+)"', as_alice.get(f"{url}?at={at}").content.decode()).group(1)  # type: ignore[union-attr]
        for at in range(1, total + 1)
    ]

    assert layers[0] == "connect"
    assert layers.index("prompt") < layers.index("request") < layers.index("response")
    assert layers.index("parsed") < layers.index("rpc_request") < layers.index("rpc_result")
    assert layers[-1] == "answer"
    assert "data-slide-next" in first and "data-slide-prev" not in first
    last = as_alice.get(f"{url}?at={total}").content.decode()
    assert "data-slide-prev" in last and "data-slide-next" not in last
    select = as_alice.get(f"{url}?at={layers.index('parsed') + 1}").content.decode()
    assert 'class="mark-select">SELECT' in select
    assert "get_weather_forecast" in html.unescape(select)


def test_another_user_cannot_step_through_a_turn() -> None:
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    turn = _weather_turn(alice)

    response = _signed_in(bob).get(
        reverse("inspector-turn-walk", args=[turn.conversation.public_id, turn.pk])
    )

    assert response.status_code == 404


def test_the_profiles_page_shows_a_learned_capability_and_resets_it() -> None:
    alice = UserFactory(username="alice")
    profile = ModelProfile.objects.create(name="ollama-gemma", model="gemma", native_tools="no")
    LearnedCapability.objects.create(
        profile=profile, capability="native_tools", reason="gemma does not support tools"
    )
    as_alice = _signed_in(alice)

    page = as_alice.get(reverse("inspector-profiles")).content.decode()
    reset = as_alice.post(
        reverse("inspector-profile-reset"), {"profile": profile.pk, "capability": "native_tools"}
    )

    assert "gemma does not support tools" in page
    assert "Reset native_tools to unknown" in page
    assert reset.status_code == 302
    profile.refresh_from_db()
    assert profile.native_tools == "unknown"
    assert not LearnedCapability.objects.exists()
    assert as_alice.post(reverse("inspector-profile-reset"), {"profile": "x"}).status_code == 404
    # Any signed-in user may reset (it only makes auto try more); each reset is audited.
    (entry,) = AuditEvent.objects.filter(action=CAPABILITY_RESET_ACTION)
    assert (entry.actor_name, entry.via, entry.subject) == ("alice", "web", "ollama-gemma")
    assert entry.detail["learned"]["reason"] == "gemma does not support tools"


def test_a_missing_page_is_the_sites_own_404(settings: Any) -> None:
    settings.DEBUG = False
    alice = UserFactory(username="alice")

    response = _signed_in(alice).get("/no/such/page")

    assert response.status_code == 404
    text = response.content.decode()
    assert 'id="not-found"' in text
    assert "Tool-Call Inspector" in text


def test_the_compare_views_wire_columns_explain_each_formats_fields() -> None:
    alice = UserFactory(username="alice")
    preference_set(user=alice, teaching=True)
    comparison, turns = comparison_providers_start(
        owner=alice, question=WEATHER, stream=False, servers=[demo_server_ensure()], dispatch=False
    )
    for turn in turns:
        turn_run(turn_id=turn.pk)

    text = (
        _signed_in(alice).get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()
    )

    for field in ("tool_calls", "tool_call_id", "call_id", "tool_use_id", "functionCall", "functionResponse"):
        assert f"<dt><code>{field}</code></dt>" in text, field
    assert "(no note yet)" not in text
    assert 'class="role role-model">Model</span> → <span class="role role-host">Host' in text


def test_the_500_page_renders_without_a_request() -> None:
    text = render_to_string("500.html")

    assert 'id="server-error"' in text
    assert "Tool-Call Inspector" in text


def test_a_failing_page_is_the_sites_own_styled_500(settings: Any) -> None:
    settings.DEBUG = False
    settings.ROOT_URLCONF = "tests.inspector.error_urls"
    client = Client(raise_request_exception=False)
    client.force_login(UserFactory(username="alice"))

    response = client.get("/broken/")

    assert response.status_code == 500
    text = response.content.decode()
    assert 'id="server-error"' in text and "a view that fails" not in text
    stylesheet = re.search(r'<link rel="stylesheet" href="([^"]+)"', text)
    assert stylesheet is not None
    css = b"".join(client.get(stylesheet.group(1)).streaming_content).decode()  # type: ignore[attr-defined]
    assert ".error-page {" in css


def test_a_finished_turn_draws_its_timeline_as_svg() -> None:
    alice = UserFactory(username="alice")
    turn = _weather_turn(alice)

    text = (
        _signed_in(alice)
        .get(reverse("inspector-conversation", args=[turn.conversation.public_id]))
        .content.decode()
    )

    chart = re.search(r'<svg class="waterfall-chart".*?</svg>', text, re.S)
    assert chart is not None
    bars = re.findall(r'<g class="wf-bar wf-(\w+) wf-status-(\w+)">', chart.group(0))
    assert bars == [("connect", "ok"), ("decide", "ok"), ("tool", "ok"), ("answer", "ok")]
    assert re.search(r"\d+ ms · \d+ ms on the wire · \d+ in / \d+ out tokens", chart.group(0))
    # Inside each model and tool bar, the time of its own exchanges (the HTTP call, tools/call).
    wire = re.findall(r'<rect class="wf-wire" x="([\d.]+)" y="\d+" width="([\d.]+)"', chart.group(0))
    assert len(wire) >= 3
    widths = [float(w) for w in re.findall(r'<rect x="[\d.]+" y="\d+" width="([\d.]+)"', chart.group(0))]
    assert all(2 <= width <= 700 for width in widths)


def test_the_timeline_reads_only_what_it_draws_in_one_query_and_draws_the_same() -> None:
    turn = _weather_turn(UserFactory(username="alice"))
    # Each step's wire time: from its first exchange's start, as long as its exchanges took.
    timings = []
    for step in Step.objects.filter(turn=turn):
        wire = [
            e
            for e in Exchange.objects.filter(step=step).exclude(direction="local")
            if e.duration_ms is not None
        ]
        if wire:
            timings.append((step.pk, min(e.started_at for e in wire), sum(e.duration_ms for e in wire)))
    full = turn_waterfall(list(Step.objects.filter(turn=turn).order_by("started_at", "seq")), timings)

    with CaptureQueriesContext(connection) as queries:
        drawn = waterfall(turn)

    # A field left out of WATERFALL_FIELDS but read by a bar would cost a query per step; the
    # wire times are summed in the same query.
    assert len(queries.captured_queries) == 1
    assert '"prompt"' not in queries.captured_queries[0]["sql"]
    assert drawn == full and drawn is not None and len(drawn.bars) == 4


def test_the_workbench_names_the_roles_and_explains_the_json_rpc_fields() -> None:
    alice = UserFactory(username="alice")
    preference_set(user=alice, teaching=True)
    operation = operation_start(
        server=demo_server_ensure(),
        user=alice,
        kind=Operation.Kind.TOOLS_CALL,
        target="calculate",
        arguments={"expression": "6 * 7"},
    )

    text = _signed_in(alice).get(reverse("servers-operation", args=[operation.public_id])).content.decode()

    assert 'data-sender="Client" data-receiver="Server"' in text
    assert "EXECUTE: the host runs" in text
    for field in ("jsonrpc", "method", "params", "arguments", "content", "structuredContent", "isError"):
        assert f"<dt><code>{field}</code></dt>" in text, field
    assert "(no note yet)" not in text


@pytest.mark.parametrize("raw", ["²", "9" * 5000, "9" * 25, "-1"])
def test_hostile_numbers_in_the_step_through_and_the_profile_forms_are_answered_not_crashed(raw: str) -> None:
    alice = UserFactory(username="alice")
    turn = _weather_turn(alice)
    as_alice = _signed_in(alice)
    url = reverse("inspector-turn-walk", args=[turn.conversation.public_id, turn.pk])

    walk = as_alice.get(url, {"at": raw})

    # An unreadable slide number starts at the first slide, as a missing one does.
    assert walk.status_code == 200 and "slide 1 of" in walk.content.decode()
    assert as_alice.post(reverse("inspector-profile-reset"), {"profile": raw}).status_code == 404
    assert presentation.sent_call(raw) == "first"
