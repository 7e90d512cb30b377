"""No page lets a hidden character act: whatever a template shows — a workbench operation's
result, an eval's questions and reasons, an attribute such as a tooltip — reaches the browser
with its invisible and bidirectional characters marked ``⟨U+XXXX⟩`` (``inspector.templating``),
while an editable field and a script's data keep them as stored."""

from __future__ import annotations

import re
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.template import engines
from django.test import Client
from django.urls import reverse

from inspector.evals.models import EvalCell
from inspector.evals_forms import EXAMPLE_SUITE
from servers.models import Operation
from tests.factories import McpServerFactory, UserFactory
from tests.inspector.test_evals_views import _finished_run, _suite

pytestmark = pytest.mark.django_db

OVERRIDE = "Final answer \u202eevil\u202c done"
CITY = "Bei\u202ejing\u202c"
HIDDEN = re.compile("[\u200b\u202a-\u202e\u2066-\u2069\ufeff]")
SPAN = '<span class="hidden-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>'


def _outside_fields(page: str) -> str:
    """The page without its editable fields' contents (a textarea keeps what it will send) and
    its ``data-*`` attributes (what its scripts read)."""
    page = re.sub(r"<textarea\b[^>]*>.*?</textarea>", "", page, flags=re.DOTALL)
    return re.sub(r'\sdata-[\w-]+="[^"]*"', "", page)


@pytest.fixture
def alice() -> User:
    return UserFactory(username="alice")


@pytest.fixture
def alice_client(alice: User) -> Client:
    client = Client()
    client.force_login(alice)
    return client


def test_a_workbench_operations_result_error_and_arguments_show_markers(
    alice: User, alice_client: Client
) -> None:
    server = McpServerFactory(name="files", owner=alice)
    operation = Operation.objects.create(
        server=server,
        user=alice,
        kind=Operation.Kind.TOOLS_CALL,
        target="read",
        arguments={"path": CITY},
        status=Operation.Status.ERROR,
        error=f"the tool failed on {CITY}",
        result={
            "content": [
                {"type": "text", "text": OVERRIDE, "annotations": {"audience": [CITY]}},
                {"type": "resource_link", "uri": "file:///a", "name": CITY},
            ],
            "structuredContent": {"city": CITY},
        },
    )

    page = alice_client.get(reverse("servers-operation", args=[operation.public_id])).content.decode()

    assert not HIDDEN.search(page), HIDDEN.search(page)
    assert f"Final answer {SPAN}evil" in page
    assert f"the tool failed on Bei{SPAN}jing" in page


def test_eval_pages_show_an_evals_hidden_characters_as_markers(alice: Any, alice_client: Client) -> None:
    suite = _suite(alice)
    run = _finished_run(suite, question=OVERRIDE, reason=f"no call for {CITY}")
    EvalCell.objects.filter(run=run, variant="terse").update(variant=f"t{CITY}")

    pages = {
        name: alice_client.get(reverse(name, args=[public_id])).content.decode()
        for name, public_id in (
            ("inspector-eval-suite", suite.public_id),
            ("inspector-eval-run", run.public_id),
            ("inspector-eval-run-results", run.public_id),
        )
    }

    for name, page in pages.items():
        assert not HIDDEN.search(_outside_fields(page)), name
    assert f"Final answer {SPAN}evil" in pages["inspector-eval-run-results"]
    assert f"no call for Bei{SPAN}jing" in pages["inspector-eval-run-results"]


def test_attributes_carry_plain_markers_and_fields_and_data_keep_the_characters() -> None:
    template = engines["django"].from_string(
        '<p title="{{ text }}" data-raw="{{ text }}">{{ text }}</p><title>{{ text }}</title>'
        '<textarea name="t">{{ text }}</textarea><input name="i" value="{{ text }}">'
        "{{ data|json_script:'d' }}"
    )

    html = template.render({"text": CITY, "data": {"city": CITY}})

    assert f'<p title="Bei⟨U+202E⟩jing⟨U+202C⟩" data-raw="{CITY}">' in html
    assert f">Bei{SPAN}jing" in html
    assert "<title>Bei⟨U+202E⟩jing⟨U+202C⟩</title>" in html
    assert f'<textarea name="t">{CITY}</textarea>' in html
    assert f'value="{CITY}"' in html
    assert '{"city": "Bei\\u202ejing\\u202c"}' in html.split('id="d"', 1)[1]


def test_a_page_without_hidden_characters_is_rendered_unchanged() -> None:
    source = '<p title="{{ text }}">{{ text }}</p>'
    assert engines["django"].from_string(source).render({"text": "Beijing"}) == (
        '<p title="Beijing">Beijing</p>'
    )


NOTE = 'class="hidden-chars-note"'


def test_a_workbench_operation_with_hidden_characters_carries_the_rows_note_and_a_clean_one_none(
    alice: User, alice_client: Client
) -> None:
    server = McpServerFactory(name="files", owner=alice)
    marked, clean = (
        Operation.objects.create(
            server=server,
            user=alice,
            kind=Operation.Kind.TOOLS_CALL,
            target="read",
            arguments={"path": "a"},
            status=Operation.Status.OK,
            result={"content": [{"type": "text", "text": text}]},
        )
        for text in (f"deep {CITY}", "Beijing")
    )

    pages = {
        operation: alice_client.get(reverse("servers-operation", args=[operation.public_id])).content.decode()
        for operation in (marked, clean)
    }
    state = alice_client.get(reverse("servers-operation-state", args=[marked.public_id])).json()["html"]

    summary = pages[marked].split('class="wb-panel op-summary"', 1)[1]
    assert NOTE in summary.split("</header>", 1)[1].split("<details", 1)[0]
    assert NOTE in state  # the polled fragment carries it too
    assert NOTE not in pages[clean]


def test_eval_failure_rows_with_hidden_characters_carry_the_note_and_clean_rows_none(
    alice: Any, alice_client: Client
) -> None:
    run = _finished_run(_suite(alice), question=OVERRIDE, reason="no call")

    page = alice_client.get(reverse("inspector-eval-run-results", args=[run.public_id])).content.decode()

    [row] = re.findall(r'<tr class="eval-failure[^"]*">.*?</tr>', page, flags=re.DOTALL)
    assert NOTE in row and "has-hidden-chars" in row
    assert page.count(NOTE) == 1  # the matrix rows and the variants hold none


def test_a_variant_and_a_matrix_row_with_hidden_characters_carry_the_note(
    alice: Any, alice_client: Client
) -> None:
    run = _finished_run(_suite(alice))
    cell = EvalCell.objects.get(run=run, variant="terse", paradigm="native")
    cell.overrides = {"demo/get_weather_forecast": {"description": f"Weather in {CITY}."}}
    cell.save()
    run.definition = {**run.definition, "variants": {"plain": {}, "terse": cell.overrides}}
    run.save()
    EvalCell.objects.filter(run=run, paradigm="prompt_xml").update(model=f"de{CITY}mo")

    page = alice_client.get(reverse("inspector-eval-run-results", args=[run.public_id])).content.decode()

    [terse] = re.findall(
        r'<article class="variant" data-variant="terse">.*?</article>', page, flags=re.DOTALL
    )
    [plain] = re.findall(
        r'<article class="variant" data-variant="plain">.*?</article>', page, flags=re.DOTALL
    )
    assert NOTE in terse and NOTE not in plain
    rows = re.findall(r'<th scope="row">.*?</th>', page, flags=re.DOTALL)
    assert [NOTE in row for row in rows] == [False, True], rows


def test_a_suite_with_hidden_characters_is_flagged_on_its_page_and_in_the_list(
    alice: Any, alice_client: Client
) -> None:
    text = EXAMPLE_SUITE.replace("Hello there", OVERRIDE).replace("weather-basics", f"wea{CITY}")
    suite = _suite(alice, text=text)
    _suite(alice)  # a clean one beside it

    detail = alice_client.get(reverse("inspector-eval-suite", args=[suite.public_id])).content.decode()
    listing = alice_client.get(reverse("inspector-evals")).content.decode()

    assert 'id="suite-hidden-note"' in detail
    assert NOTE in detail.split('class="suite-head"', 1)[1].split("</header>", 1)[0]
    rows = re.findall(r"<tr>\s*<td>.*?</tr>", listing, flags=re.DOTALL)
    assert sorted(NOTE in row for row in rows) == [False, True], rows
