"""Comparisons: one question under several paradigms and models, side by side, live."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from django.utils.html import escape

from conversations.loop.paradigms import PARADIGMS
from conversations.models import Comparison, Conversation, Step, Turn
from conversations.selectors import comparison_runs
from inspector.forms import paradigm_explanation
from tests.factories import (
    ComparisonFactory,
    ConversationFactory,
    DemoModelProfileFactory,
    ExchangeFactory,
    McpServerFactory,
    ModelProfileFactory,
    StepFactory,
    TurnFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture
def alice() -> Any:
    return UserFactory(username="alice")


@pytest.fixture
def alice_client(client: Client, alice: Any) -> Client:
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(client: Client) -> Client:
    client.force_login(UserFactory(username="bob"))
    return client


def run(comparison: Comparison, *, paradigm: str = "native", profile: Any = None, **turn: Any) -> Turn:
    """A run of ``comparison``: its conversation and first turn."""
    conversation = ConversationFactory(
        owner=comparison.owner,
        comparison=comparison,
        title=comparison.question,
        paradigm=paradigm,
        model_profile=profile or DemoModelProfileFactory(),
    )
    turn.setdefault("question", comparison.question)
    return TurnFactory(conversation=conversation, **turn)


@pytest.fixture
def comparison(alice: Any) -> Comparison:
    comparison = ComparisonFactory(owner=alice, question=WEATHER)
    run(comparison, paradigm="native", answer="Beijing tomorrow: sunny, 25 °C.")
    run(
        comparison,
        paradigm="native",
        profile=ModelProfileFactory(name="gpt-x", model="gpt-x-mini"),
        answer="",
    )
    return comparison


def detail_url(comparison: Comparison) -> str:
    return reverse("inspector-comparison", args=[comparison.public_id])


def summary_url(comparison: Comparison) -> str:
    return reverse("inspector-comparison-summary", args=[comparison.public_id])


def form_data(**overrides: Any) -> dict[str, Any]:
    data: dict[str, Any] = {
        "question": WEATHER,
        "model_profiles": [DemoModelProfileFactory().pk, ModelProfileFactory(name="gpt-x").pk],
        "paradigms": ["native"],
        "tool_choice": "auto",
        "tool_choice_name": "",
        "servers": [McpServerFactory(demo=True).pk],
    }
    data.update(overrides)
    return data


# --- access ---------------------------------------------------------------------------------


def test_anonymous_visitors_are_sent_to_the_login_page(client: Client, comparison: Comparison) -> None:
    for method, url in [
        ("get", reverse("inspector-comparisons")),
        ("post", reverse("inspector-comparison-create")),
        ("get", detail_url(comparison)),
        ("get", summary_url(comparison)),
    ]:
        response = getattr(client, method)(url)
        assert response.status_code == 302, url
        assert response["Location"].startswith(reverse("login") + "?next="), url


def test_bob_gets_404_for_alices_comparison_and_its_summary(
    bob_client: Client, comparison: Comparison
) -> None:
    assert bob_client.get(detail_url(comparison)).status_code == 404
    assert bob_client.get(summary_url(comparison)).status_code == 404


def test_a_missing_comparison_is_404(alice_client: Client) -> None:
    url = reverse("inspector-comparison", args=["00000000-0000-0000-0000-000000000000"])

    assert alice_client.get(url).status_code == 404


def test_the_list_shows_only_the_users_own_comparisons(alice_client: Client, comparison: Comparison) -> None:
    ComparisonFactory(owner=UserFactory(username="bob"), question="Bob's secret comparison")

    html = alice_client.get(reverse("inspector-comparisons")).content.decode()

    assert WEATHER in html
    assert detail_url(comparison) in html
    assert "Bob" not in html


def test_every_page_links_to_compare_in_the_nav(alice_client: Client) -> None:
    html = alice_client.get(reverse("inspector-conversations")).content.decode()

    assert f'<a href="{reverse("inspector-comparisons")}">Compare</a>' in html


# --- the form -------------------------------------------------------------------------------


def test_the_form_offers_every_paradigm_ticked_and_the_demo_model_preselected(alice_client: Client) -> None:
    demo = DemoModelProfileFactory()
    ModelProfileFactory(name="gpt-x")

    response = alice_client.get(reverse("inspector-comparisons"))

    form = response.context["form"]
    assert [key for key, _ in form.fields["paradigms"].choices] == list(PARADIGMS)
    assert form.initial["paradigms"] == list(PARADIGMS)
    assert form.initial["model_profiles"] == [demo.pk]
    html = response.content.decode()
    for key in PARADIGMS:
        assert f'name="paradigms" value="{key}"' in html
    assert escape(paradigm_explanation("native")) in html


def test_creating_a_comparison_starts_one_conversation_per_run_and_redirects(
    alice_client: Client, alice: Any, django_capture_on_commit_callbacks: Any
) -> None:
    data = form_data()

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = alice_client.post(reverse("inspector-comparison-create"), data)

    comparison = Comparison.objects.get()
    assert response.status_code == 302
    assert response["Location"] == detail_url(comparison)
    assert (comparison.owner, comparison.question) == (alice, WEATHER)
    conversations = list(comparison.conversations.order_by("pk"))
    assert [(c.model_profile.pk, c.paradigm) for c in conversations] == [
        (data["model_profiles"][0], "native"),
        (data["model_profiles"][1], "native"),
    ]
    assert all([s.pk for s in c.servers.all()] == data["servers"] for c in conversations)
    assert all(c.turns.get().status == Turn.Status.QUEUED for c in conversations)
    assert len(callbacks) == 2  # each run dispatched only on commit


def test_a_named_tool_choice_applies_to_every_run(
    alice_client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    data = form_data(tool_choice="named", tool_choice_name="demo/get_weather_forecast")

    with django_capture_on_commit_callbacks(execute=False):
        alice_client.post(reverse("inspector-comparison-create"), data)

    assert {(c.tool_choice, c.tool_choice_name) for c in Conversation.objects.all()} == {
        ("named", "demo/get_weather_forecast")
    }


def test_fewer_than_two_runs_is_a_form_error(alice_client: Client) -> None:
    data = form_data(model_profiles=[DemoModelProfileFactory().pk], paradigms=["native"])

    response = alice_client.post(reverse("inspector-comparison-create"), data)

    assert response.status_code == 400
    assert "at least two runs" in str(response.context["form"].non_field_errors())
    assert "at least two runs" in response.content.decode()
    assert not Comparison.objects.exists()
    assert not Conversation.objects.exists()


@pytest.mark.parametrize("missing", ["question", "model_profiles", "paradigms"])
def test_a_comparison_needs_a_question_models_and_paradigms(alice_client: Client, missing: str) -> None:
    data = form_data()
    del data[missing]

    response = alice_client.post(reverse("inspector-comparison-create"), data)

    assert response.status_code == 400
    assert missing in response.context["form"].errors
    assert not Comparison.objects.exists()


def test_an_unknown_paradigm_is_refused(alice_client: Client) -> None:
    response = alice_client.post(reverse("inspector-comparison-create"), form_data(paradigms=["telepathy"]))

    assert response.status_code == 400
    assert "paradigms" in response.context["form"].errors


def test_too_many_runs_are_refused(alice_client: Client) -> None:
    profiles = [ModelProfileFactory(name=f"model-{n}").pk for n in range(13)]

    response = alice_client.post(reverse("inspector-comparison-create"), form_data(model_profiles=profiles))

    assert response.status_code == 400
    assert "at most 12" in str(response.context["form"].non_field_errors())


# --- the comparison page --------------------------------------------------------------------


def test_the_page_shows_one_column_per_run_linking_to_its_conversation(
    alice_client: Client, comparison: Comparison
) -> None:
    response = alice_client.get(detail_url(comparison))

    assert response.status_code == 200
    html = response.content.decode()
    assert html.count('class="run-head') == 2
    for conversation in comparison.conversations.all():
        assert reverse("inspector-conversation", args=[conversation.public_id]) in html
        assert f'data-ws-url="/ws/conversations/{conversation.public_id}/"' in html
    assert PARADIGMS["native"].label in html
    assert "gpt-x-mini" in html
    assert "Beijing tomorrow: sunny, 25 °C." in html
    assert f'data-summary-url="{summary_url(comparison)}"' in html
    assert "comparison_detail.js" in html and "comparison_detail.css" in html


def test_the_summary_is_the_columns_fragment_the_page_includes(
    alice_client: Client, comparison: Comparison
) -> None:
    page = alice_client.get(detail_url(comparison)).content.decode()
    summary = alice_client.get(summary_url(comparison)).content.decode()

    assert summary.startswith('<div id="compare-columns"')
    assert summary.strip() in page
    assert 'data-finished="true"' in summary
    # No price set for the run's profile: the cost cell says where prices are set.
    assert "set prices in Models</a>" in summary


def test_the_summary_says_when_a_run_is_still_going(alice_client: Client, comparison: Comparison) -> None:
    running = run(comparison, paradigm="native", profile=ModelProfileFactory(name="slow"), status="running")
    StepFactory(turn=running, kind=Step.Kind.CONNECT, title="1 tool from 1 server")

    summary = alice_client.get(summary_url(comparison)).content.decode()

    assert '<div id="compare-columns" class="compare-columns" data-finished="false">' in summary
    assert summary.count('data-finished="false"') == 2  # the columns, and the running run
    assert "1 tool from 1 server" in summary


def test_hostile_answers_and_titles_are_escaped(alice_client: Client, alice: Any) -> None:
    hostile = "<script>alert(1)</script>"
    comparison = ComparisonFactory(owner=alice, question=hostile)
    turn = run(comparison, answer=hostile)
    run(comparison, profile=ModelProfileFactory(name="other"), status="failed", answer="", error=hostile)
    StepFactory(turn=turn, kind=Step.Kind.TOOL, title=hostile, tool_name=hostile, arguments={"x": hostile})

    html = alice_client.get(detail_url(comparison)).content.decode()

    assert "<script>alert" not in html
    assert html.count("&lt;script&gt;alert(1)&lt;/script&gt;") >= 4


# --- the numbers ----------------------------------------------------------------------------


def test_run_summaries_add_up_the_steps_of_each_run(alice: Any) -> None:
    comparison = ComparisonFactory(owner=alice)
    started = timezone.now() - timedelta(seconds=3)
    turn = run(
        comparison, paradigm="native", started_at=started, finished_at=started + timedelta(milliseconds=2500)
    )
    server = McpServerFactory(demo=True)
    StepFactory(turn=turn, kind=Step.Kind.CONNECT, title="3 tools from 1 server")
    decide = StepFactory(
        turn=turn,
        title="model call",
        usage={"prompt_tokens": 400, "completion_tokens": 20},
        tokens={"encoding": "o200k_base", "prompt": 380, "tools": {"demo__get_weather_forecast": 90}},
    )
    ExchangeFactory(step=decide, duration_ms=120.5)
    StepFactory(
        turn=turn,
        parent=decide,
        kind=Step.Kind.TOOL,
        title="demo/get_weather_forecast",
        server=server,
        tool_name="get_weather_forecast",
        arguments={"city": "Beijing", "day": "tomorrow"},
    )
    answer = StepFactory(
        turn=turn,
        kind=Step.Kind.ANSWER,
        usage={"prompt_tokens": 450, "completion_tokens": 35, "total_tokens": 485},
        tokens={"encoding": "o200k_base", "prompt": 430},
    )
    ExchangeFactory(step=answer, duration_ms=80)
    ExchangeFactory(step=answer, mcp=True, duration_ms=999)  # not a model call
    failed = run(comparison, paradigm="native", profile=ModelProfileFactory(name="gpt-x"), status="failed")
    failed.answer, failed.error = "", "the provider refused: HTTP 401"
    failed.save()
    broken = StepFactory(
        turn=failed, kind=Step.Kind.ERROR, status=Step.Status.ERROR, title="model call failed"
    )
    ExchangeFactory(step=broken, status="401", duration_ms=15)

    first, second = comparison_runs(comparison=comparison)

    assert (first.paradigm, first.profile, first.model, first.is_demo) == ("native", "demo", "demo", True)
    assert (first.status, first.finished, first.answered) == ("done", True, True)
    assert first.steps == 4
    assert first.model_calls == 2
    assert (first.tokens_in, first.tokens_out) == (850, 55)
    assert (first.prompt_tokens, first.prompt_encodings) == (810, ["o200k_base"])
    assert first.llm_ms == pytest.approx(200.5)
    assert first.wall_ms == pytest.approx(2500)
    assert (first.tool, first.arguments) == (
        "demo/get_weather_forecast",
        {"city": "Beijing", "day": "tomorrow"},
    )
    assert [(row.kind, row.depth) for row in first.rows] == [
        ("connect", 0),
        ("decide", 0),
        ("tool", 1),
        ("answer", 0),
    ]

    assert (second.status, second.answered, second.error) == (
        "failed",
        False,
        "the provider refused: HTTP 401",
    )
    assert (second.steps, second.model_calls, second.llm_ms) == (1, 1, 15)
    assert (second.tokens_in, second.tokens_out, second.prompt_tokens) == (None, None, None)
    assert (second.tool, second.arguments) == ("", None)


def test_the_page_shows_the_numbers(alice_client: Client, alice: Any) -> None:
    comparison = ComparisonFactory(owner=alice)
    turn = run(comparison)
    step = StepFactory(
        turn=turn,
        usage={"prompt_tokens": 1400, "completion_tokens": 22},
        tokens={"encoding": "o200k_base", "prompt": 1350},
    )
    ExchangeFactory(step=step, duration_ms=850)
    run(comparison, profile=ModelProfileFactory(name="gpt-x"))

    html = alice_client.get(detail_url(comparison)).content.decode()

    assert "<strong>1,400</strong> in · <strong>22</strong> out" in html
    assert "<strong>1,350</strong> <code>o200k_base</code>" in html
    assert "850 ms" in html
    assert "not reported" in html  # the other run: no usage, no made-up number


def test_a_run_without_usage_has_no_token_totals(alice: Any) -> None:
    comparison = ComparisonFactory(owner=alice)
    turn = run(comparison)
    ExchangeFactory(
        step=StepFactory(turn=turn, tokens={"encoding": None, "prompt": None, "note": "unknown model"})
    )
    run(comparison, profile=ModelProfileFactory(name="gpt-x"))

    summary = comparison_runs(comparison=comparison)[0]

    assert (summary.tokens_in, summary.tokens_out, summary.prompt_tokens) == (None, None, None)
    assert summary.model_calls == 1


def test_the_new_comparison_form_starts_from_the_demo_model_under_every_paradigm(alice: Any) -> None:
    """The demo model's wire-format profiles (made by ``make run``) are offered, not all ticked:
    nine models under every paradigm would be more runs than a comparison takes."""
    from conversations.services import demo_format_profiles_ensure, demo_profile_ensure
    from inspector.forms import ComparisonForm

    demo = demo_profile_ensure()
    for stream in (False, True):
        demo_format_profiles_ensure(stream=stream)

    form = ComparisonForm(user=alice)

    assert form.initial["model_profiles"] == [demo.pk]
    assert form.initial["paradigms"] == list(PARADIGMS)
    offered = {label for _, label in form.fields["model_profiles"].choices}
    assert any("demo gemini streamed" in str(label) for label in offered)


def test_alice_is_offered_a_stdio_server_only_staff_may_start_disabled_and_cannot_compare_with_it(
    alice_client: Client,
) -> None:
    private = McpServerFactory(name="local-tools")

    html = alice_client.get(reverse("inspector-comparisons")).content.decode()
    response = alice_client.post(reverse("inspector-comparison-create"), form_data(servers=[private.pk]))

    assert "disabled" in html[html.index(f'value="{private.pk}"') :].split(">", 1)[0]
    assert response.status_code == 400
    assert "only staff may start it" in str(response.context["form"].errors["servers"])
    assert not Comparison.objects.exists()


def test_staff_may_compare_with_any_stdio_server(
    client: Client, django_capture_on_commit_callbacks: Any
) -> None:
    client.force_login(UserFactory(username="carol", is_staff=True))
    private = McpServerFactory(name="local-tools")

    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(reverse("inspector-comparison-create"), form_data(servers=[private.pk]))

    assert response.status_code == 302
    assert {s.name for c in Conversation.objects.all() for s in c.servers.all()} == {"local-tools"}


def test_a_run_whose_servers_failed_to_connect_says_so_beside_its_answer(
    alice_client: Client, alice: Any
) -> None:
    comparison = ComparisonFactory(owner=alice, question=WEATHER)
    turn = run(comparison, status=Turn.Status.DONE, answer="No tools were offered, so I cannot look this up.")
    StepFactory(
        turn=turn,
        seq=1,
        kind=Step.Kind.CONNECT,
        status=Step.Status.ERROR,
        title="0 tools from 1 server(s)",
        diagnostics=["demo: error: demo closed the connection during the call"],
    )

    [summary] = comparison_runs(comparison=comparison)
    page = alice_client.get(detail_url(comparison)).content.decode()

    assert summary.answered
    assert summary.problems == ["demo: error: demo closed the connection during the call"]
    assert 'class="badge tone-error run-problems"' in page
    assert "demo closed the connection during the call" in page
