"""The eval pages: a suite typed in or uploaded (a bad one is refused naming the field, and the
text stays), edited, run; the run's progress and results; who sees what (anyone else gets 404);
and hostile strings from suites, models and graders shown as text, never as markup."""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any
from unittest import mock

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client
from django.urls import reverse
from django.utils.html import escape

from conversations.models import AuditEvent, Conversation
from inspector import evals_results
from inspector.evals.models import EvalCaseResult, EvalCell, EvalRun, Suite
from inspector.evals.services import suite_save
from inspector.evals_forms import EXAMPLE_SUITE
from servers import gateway
from tests.factories import ConversationFactory, UserFactory

pytestmark = pytest.mark.django_db

HOSTILE = '<script>alert("x")</script><img src=x onerror=alert(1)>'
SMALL_SUITE = """\
name: small
models: [demo]
paradigms: [native]
servers: [demo]
cases:
  - question: What will the weather be like in Beijing tomorrow?
    expect: [{tool: demo/get_weather_forecast, arguments: {city: Beijing}}]
"""


@pytest.fixture
def alice() -> Any:
    return UserFactory(username="alice")


@pytest.fixture
def bob() -> Any:
    return UserFactory(username="bob")


@pytest.fixture
def alice_client(alice: Any) -> Client:
    client = Client()
    client.force_login(alice)
    return client


@pytest.fixture
def bob_client(bob: Any) -> Client:
    client = Client()
    client.force_login(bob)
    return client


def _suite(owner: Any, text: str = EXAMPLE_SUITE) -> Suite:
    return suite_save(owner=owner, text=text)


def _finished_run(
    suite: Suite, *, question: str = "What is 12 * (3 + 4)?", reason: str = "no call"
) -> EvalRun:
    """A done run of one model × two paradigms × two variants: one case each, one cell failing."""
    run = EvalRun.objects.create(
        suite=suite,
        owner=suite.owner,
        definition=suite.definition,
        status=EvalRun.Status.DONE,
        total=4,
        finished=4,
        passed=3,
    )
    conversation = ConversationFactory(owner=suite.owner)
    position = 0
    for paradigm in ("native", "prompt_xml"):
        for variant, overrides in (
            ("plain", {}),
            ("terse", {"demo/get_weather_forecast": {"description": "Weather."}}),
        ):
            cell = EvalCell.objects.create(
                run=run,
                position=position,
                model="demo",
                paradigm=paradigm,
                variant=variant,
                overrides=overrides,
            )
            position += 1
            failing = paradigm == "prompt_xml" and variant == "terse"
            EvalCaseResult.objects.create(
                cell=cell,
                case_index=0,
                question=question,
                conversation=conversation,
                status=EvalCaseResult.Status.FAILED if failing else EvalCaseResult.Status.PASSED,
                failure=EvalCaseResult.Failure.NO_CALL if failing else "",
                reason=reason if failing else "",
                input_tokens=100 if variant == "plain" else 80,
                output_tokens=10,
                cost=Decimal("0.0001"),
                latency_ms=50,
            )
    return run


# ---- suites ------------------------------------------------------------------------------------


def test_the_list_offers_the_example_suite_and_the_nav_links_evals(alice_client: Client) -> None:
    response = alice_client.get(reverse("inspector-evals"))
    assert response.status_code == 200
    page = response.content.decode()
    assert 'href="/evals/"' in page
    assert escape('"name": "weather-basics"') in page


def test_a_typed_suite_is_stored_as_written_and_opens_its_page(alice_client: Client, alice: Any) -> None:
    response = alice_client.post(reverse("inspector-eval-suite-create"), {"document": SMALL_SUITE})
    suite = Suite.objects.get(owner=alice)
    assert response.status_code == 302
    assert response["Location"] == reverse("inspector-eval-suite", args=[suite.public_id])
    assert suite.name == "small"
    assert suite.source == SMALL_SUITE
    assert suite.definition["paradigms"] == ["native"]


def test_a_bad_suite_is_refused_naming_the_field_and_keeps_the_text(alice_client: Client, alice: Any) -> None:
    bad = EXAMPLE_SUITE.replace('"demo/calculate"', '"calculate"')
    response = alice_client.post(reverse("inspector-eval-suite-create"), {"document": bad})
    assert response.status_code == 400
    page = response.content.decode()
    assert "cases[1].expect[0].tool" in page
    assert escape('{"tool": "calculate"}') in page  # what was typed is still in the box
    assert not Suite.objects.filter(owner=alice).exists()


def test_a_suite_with_a_name_too_long_to_store_is_refused_naming_the_name(
    alice_client: Client, alice: Any
) -> None:
    response = alice_client.post(
        reverse("inspector-eval-suite-create"),
        {"document": SMALL_SUITE.replace("name: small", "name: " + "n" * 500)},
    )
    assert response.status_code == 400
    assert "name: " in response.content.decode()
    assert not Suite.objects.filter(owner=alice).exists()


@pytest.mark.parametrize("question", ["a\\u0000b", "a\\ud800b", "a\x00b"])
def test_a_suite_with_a_nul_or_a_lone_surrogate_is_refused_not_a_server_error(
    alice_client: Client, alice: Any, question: str
) -> None:
    text = SMALL_SUITE.replace(
        "question: What will the weather", f'question: "{question} What will the weather'
    ).replace("tomorrow?\n", 'tomorrow?"\n')
    response = alice_client.post(reverse("inspector-eval-suite-create"), {"document": text})
    assert response.status_code == 400
    page = response.content.decode()
    assert "cases[0].question: contains a" in page or "Null characters are not allowed" in page
    assert not Suite.objects.filter(owner=alice).exists()


def test_a_suite_named_like_another_of_the_users_is_refused_naming_the_name(
    alice_client: Client, alice: Any
) -> None:
    _suite(alice, SMALL_SUITE)
    response = alice_client.post(reverse("inspector-eval-suite-create"), {"document": SMALL_SUITE})
    assert response.status_code == 400
    assert "name: you already have a suite named" in response.content.decode()


def test_an_uploaded_suite_file_becomes_a_suite(alice_client: Client, alice: Any) -> None:
    upload = SimpleUploadedFile("weather.json", EXAMPLE_SUITE.encode(), content_type="application/json")
    response = alice_client.post(reverse("inspector-eval-suite-upload"), {"file": upload})
    assert response.status_code == 302
    suite = Suite.objects.get(owner=alice)
    assert suite.name == "weather-basics"
    assert suite.source == EXAMPLE_SUITE


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (b"\xff\xfe not utf-8", "not UTF-8"),
        (b"name: x\nmodels: [demo]\nparadigms: [telepathy]\ncases: []\n", "paradigms[0]"),
        (b"[" * 5000, "nested deeper than"),
    ],
)
def test_a_bad_suite_file_is_refused_with_a_clear_error(
    alice_client: Client, alice: Any, content: bytes, expected: str
) -> None:
    upload = SimpleUploadedFile("suite.yaml", content, content_type="application/yaml")
    response = alice_client.post(reverse("inspector-eval-suite-upload"), {"file": upload})
    assert response.status_code == 400
    assert expected in response.content.decode()
    assert not Suite.objects.filter(owner=alice).exists()


def test_editing_a_suite_keeps_a_bad_edit_in_the_box_and_saves_a_good_one(
    alice_client: Client, alice: Any
) -> None:
    suite = _suite(alice, SMALL_SUITE)
    url = reverse("inspector-eval-suite-update", args=[suite.public_id])
    bad = SMALL_SUITE.replace("paradigms: [native]", "paradigms: native")
    response = alice_client.post(url, {"document": bad})
    assert response.status_code == 400
    assert "paradigms: must be a list" in response.content.decode()
    assert escape("paradigms: native") in response.content.decode()
    good = SMALL_SUITE.replace("paradigms: [native]", "paradigms: [native, intent]")
    assert alice_client.post(url, {"document": good}).status_code == 302
    suite.refresh_from_db()
    assert suite.definition["paradigms"] == ["native", "intent"]
    assert suite.source == good


# ---- runs --------------------------------------------------------------------------------------


def test_running_a_suite_starts_a_run_with_the_chosen_settings(alice_client: Client, alice: Any) -> None:
    suite = _suite(alice)
    with mock.patch("inspector.evals_views.eval_services.run_start") as start:
        start.return_value = EvalRun.objects.create(suite=suite, owner=alice, definition=suite.definition)
        response = alice_client.post(
            reverse("inspector-eval-run-create", args=[suite.public_id]), {"concurrency": "3", "repeats": "2"}
        )
    assert response.status_code == 302
    assert start.call_args.kwargs == {"suite": suite, "user": alice, "concurrency": 3, "repeats": 2}


def test_a_run_with_impossible_settings_is_refused(alice_client: Client, alice: Any) -> None:
    suite = _suite(alice)
    response = alice_client.post(
        reverse("inspector-eval-run-create", args=[suite.public_id]), {"concurrency": "0", "repeats": "999"}
    )
    assert response.status_code == 400
    assert not EvalRun.objects.exists()


def test_a_suite_naming_a_model_that_does_not_exist_is_not_run_and_says_which(
    alice_client: Client, alice: Any
) -> None:
    suite = _suite(alice, SMALL_SUITE.replace("models: [demo]", "models: [demo, no-such-model]"))
    response = alice_client.post(
        reverse("inspector-eval-run-create", args=[suite.public_id]), {"concurrency": "2", "repeats": "1"}
    )
    assert response.status_code == 400
    assert "models[1]: no model profile named" in response.content.decode()
    assert not EvalRun.objects.exists()


def test_a_suite_whose_variant_names_a_parameter_the_tool_lacks_is_not_run_and_says_which(
    alice_client: Client, alice: Any
) -> None:
    reworded = "variants: {terse: {demo/get_weather_forecast: {parameters: {town: Which town.}}}}\ncases:"
    suite = _suite(alice, SMALL_SUITE.replace("cases:", reworded))
    try:
        response = alice_client.post(
            reverse("inspector-eval-run-create", args=[suite.public_id]), {"concurrency": "2", "repeats": "1"}
        )
    finally:
        gateway.close_all()
    assert response.status_code == 400
    assert "variants.terse.demo/get_weather_forecast.parameters.town: no such parameter" in (
        response.content.decode()
    )
    assert not EvalRun.objects.exists()


def test_cancelling_a_run_stops_it_and_the_page_says_so(alice_client: Client, alice: Any) -> None:
    suite = _suite(alice)
    run = EvalRun.objects.create(
        suite=suite, owner=alice, definition=suite.definition, status=EvalRun.Status.RUNNING, total=30
    )
    page = alice_client.get(reverse("inspector-eval-run", args=[run.public_id])).content.decode()
    assert 'id="eval-cancel"' in page
    response = alice_client.post(reverse("inspector-eval-run-cancel", args=[run.public_id]))
    assert response.status_code == 302
    run.refresh_from_db()
    assert run.status == EvalRun.Status.CANCELLED
    page = alice_client.get(reverse("inspector-eval-run", args=[run.public_id])).content.decode()
    assert "run cancelled" in page and 'id="eval-cancel"' not in page
    assert "Run cancelled: cancelled by alice: 0 of 30 case runs had ended" in page


def test_reading_a_runs_results_on_the_page_or_the_api_audits_each_of_its_conversations(
    alice_client: Client, alice: Any, bob_client: Client
) -> None:
    run = _finished_run(_suite(alice))
    other = ConversationFactory(owner=alice)
    EvalCaseResult.objects.filter(cell__run=run, cell__position=3).update(conversation=other)
    shown = set(
        EvalCaseResult.objects.filter(cell__run=run).values_list("conversation__public_id", flat=True)
    )
    reads = AuditEvent.objects.filter(action=AuditEvent.Action.OPENED)

    assert alice_client.get(reverse("inspector-eval-run", args=[run.public_id])).status_code == 200
    assert alice_client.get(reverse("inspector-eval-run-results", args=[run.public_id])).status_code == 200
    assert alice_client.get(reverse("api-eval-run", args=[run.public_id])).status_code == 200
    assert bob_client.get(reverse("api-eval-run", args=[run.public_id])).status_code == 404

    for via in ("eval results", "api"):
        entries = reads.filter(via=via)
        assert (
            {entry.conversation_public_id for entry in entries}
            == shown
            == {
                other.public_id,
                EvalCaseResult.objects.filter(cell__run=run, cell__position=0).get().conversation.public_id,  # type: ignore[union-attr]
            }
        )
        assert entries.count() == 2  # the page and its fragment: one read, folded
        assert {(entry.actor_name, entry.subject) for entry in entries} == {
            ("alice", f"eval run {run.public_id}")
        }
    assert not reads.filter(actor_name="bob").exists()


def test_the_owner_deletes_a_suite_by_post_its_runs_go_and_their_conversations_stay(
    alice_client: Client, alice: Any, bob_client: Client
) -> None:
    suite = _suite(alice)
    run = _finished_run(suite)
    going = EvalRun.objects.create(
        suite=suite, owner=alice, definition=suite.definition, status=EvalRun.Status.RUNNING, total=3
    )
    conversations = set(EvalCaseResult.objects.filter(cell__run=run).values_list("conversation", flat=True))
    url = reverse("inspector-eval-suite-delete", args=[suite.public_id])
    page = alice_client.get(reverse("inspector-eval-suite", args=[suite.public_id])).content.decode()
    assert f'action="{url}"' in page and "Delete this suite" in page

    assert alice_client.get(url).status_code == 405
    assert bob_client.post(url).status_code == 404
    assert Suite.objects.filter(pk=suite.pk).exists()
    response = alice_client.post(url, follow=True)

    assert response.redirect_chain == [(reverse("inspector-evals"), 302)]
    assert "its runs&#x27; conversations are kept" in response.content.decode()
    assert not Suite.objects.filter(pk=suite.pk).exists()
    assert not EvalRun.objects.filter(pk__in=[run.pk, going.pk]).exists()
    assert set(Conversation.objects.filter(owner=alice).values_list("pk", flat=True)) >= conversations
    assert alice_client.post(url).status_code == 404


def test_progress_is_a_small_json_document(alice_client: Client, alice: Any) -> None:
    suite = _suite(alice)
    run = EvalRun.objects.create(
        suite=suite,
        owner=alice,
        definition=suite.definition,
        status=EvalRun.Status.RUNNING,
        total=30,
        finished=12,
    )
    response = alice_client.get(reverse("inspector-eval-run-progress", args=[run.public_id]))
    assert response.status_code == 200
    assert json.loads(response.content) == {
        "status": "running",
        "total": 30,
        "finished": 12,
        "passed": 0,
        "running": 0,
        "done": False,
        "percent": 40,
    }
    page = alice_client.get(reverse("inspector-eval-run", args=[run.public_id])).content.decode()
    assert 'id="eval-progress"' in page and 'value="12"' in page
    assert 'id="eval-matrix"' not in page


def test_a_finished_run_shows_the_matrix_the_variants_and_the_failing_case(
    alice_client: Client, alice: Any
) -> None:
    run = _finished_run(_suite(alice))
    page = alice_client.get(reverse("inspector-eval-run", args=[run.public_id])).content.decode()
    assert page.count('class="eval-cell acc-4"') == 3
    assert page.count('class="eval-cell acc-0"') == 1
    assert "no call: <strong>1</strong>" in page
    assert "Weather." in page  # the overriding description, shown as text
    conversation = EvalCaseResult.objects.filter(status="failed").get().conversation
    assert conversation is not None
    assert reverse("inspector-conversation", args=[conversation.public_id]) in page
    fragment = alice_client.get(reverse("inspector-eval-run-results", args=[run.public_id])).content.decode()
    assert fragment.startswith('<div id="eval-results"')
    assert 'id="eval-matrix"' in fragment


def test_the_suite_page_flags_a_run_that_scored_lower_than_the_one_before(
    alice_client: Client, alice: Any
) -> None:
    suite = _suite(alice)
    first = _finished_run(suite)
    EvalCaseResult.objects.filter(cell__run=first).update(status="passed", failure="")
    _finished_run(suite)
    page = alice_client.get(reverse("inspector-eval-suite", args=[suite.public_id])).content.decode()
    assert "1 regression" in page
    assert "demo · prompt_xml · terse: 100% → 0%" in page
    assert page.count('class="regressed"') == 1  # one bar in the chart


def test_regressions_are_the_cells_below_the_baseline_interval_that_both_ran() -> None:
    # 10/10 → 5/10 is below 10/10's interval; a cell the baseline did not run is not compared.
    assert evals_results.regressed_cells(
        {("m", "p", "v"): (5, 10), ("m", "q", "v"): (0, 1)}, {("m", "p", "v"): (10, 10)}
    ) == ["m · p · v: 100% → 50%"]
    # 9/10 → 8/10 is lower, but inside 9/10's interval: not a regression (decision 0390).
    assert evals_results.regressed_cells({("m", "p", "v"): (8, 10)}, {("m", "p", "v"): (9, 10)}) == []


# ---- access and hostile strings ----------------------------------------------------------------


def test_another_user_gets_404_on_every_suite_and_run_url(bob_client: Client, alice: Any) -> None:
    suite = _suite(alice)
    run = _finished_run(suite)
    for name, public_id in (
        ("inspector-eval-suite", suite.public_id),
        ("inspector-eval-run", run.public_id),
        ("inspector-eval-run-progress", run.public_id),
        ("inspector-eval-run-results", run.public_id),
    ):
        assert bob_client.get(reverse(name, args=[public_id])).status_code == 404, name
    for name, data in (
        ("inspector-eval-suite-update", {"document": SMALL_SUITE}),
        ("inspector-eval-run-create", {"concurrency": "1", "repeats": "1"}),
    ):
        assert bob_client.post(reverse(name, args=[suite.public_id]), data).status_code == 404, name
    assert bob_client.post(reverse("inspector-eval-run-cancel", args=[run.public_id])).status_code == 404
    suite.refresh_from_db()
    assert suite.source == EXAMPLE_SUITE
    assert EvalRun.objects.count() == 1
    assert str(suite.public_id) not in bob_client.get(reverse("inspector-evals")).content.decode()


def test_signed_out_visitors_are_sent_to_log_in(client: Client, alice: Any) -> None:
    suite = _suite(alice)
    response = client.get(reverse("inspector-eval-suite", args=[suite.public_id]))
    assert response.status_code == 302
    assert "/accounts/login/" in response["Location"]


def test_hostile_strings_from_the_suite_the_model_and_the_grader_are_shown_as_text(
    alice_client: Client, alice: Any
) -> None:
    text = json.dumps(
        {
            "name": f"n{HOSTILE}",
            "models": ["demo"],
            "paradigms": ["native"],
            "servers": ["demo"],
            "variants": {
                "v": {"demo/calculate": {"description": HOSTILE, "parameters": {"expression": HOSTILE}}}
            },
            "cases": [{"question": HOSTILE, "expect": []}],
        }
    )
    suite = _suite(alice, text)
    run = _finished_run(suite, question=HOSTILE, reason=HOSTILE)
    EvalCell.objects.filter(run=run, variant="terse").update(
        variant=f"t{HOSTILE}"[:80], overrides={"demo/calculate": {"description": HOSTILE}}
    )
    pages = [
        alice_client.get(reverse("inspector-evals")),
        alice_client.get(reverse("inspector-eval-suite", args=[suite.public_id])),
        alice_client.get(reverse("inspector-eval-run", args=[run.public_id])),
        alice_client.get(reverse("inspector-eval-run-results", args=[run.public_id])),
    ]
    for response in pages:
        page = response.content.decode()
        assert response.status_code == 200
        assert "<script>alert" not in page
        assert "<img src=x" not in page
        assert escape(HOSTILE)[:40] in page


@pytest.mark.django_db(transaction=True)
def test_a_misspelt_tool_is_refused_where_the_suite_is_typed_and_nothing_is_stored(
    alice_client: Client, alice: Any
) -> None:
    from servers import gateway

    try:
        typo = SMALL_SUITE.replace("demo/get_weather_forecast", "demo/get_wether_forecast")
        assert typo != SMALL_SUITE
        response = alice_client.post(reverse("inspector-eval-suite-create"), {"document": typo})
        assert response.status_code == 400
        page = response.content.decode()
        assert "cases[0].expect[0].tool" in page and "get_weather_forecast" in page
        assert not Suite.objects.filter(owner=alice).exists()
    finally:
        gateway.close_all()
