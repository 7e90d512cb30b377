"""Teaching mode on a projector: notes rendered as text (their few Markdown marks as tags, never
raw HTML), field notes folded to one line, the class view remembered per user, and an error row
that says whether its turn went on. Real runs: the demo model in-process, the demo MCP server
over stdio."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Step, UserPreference
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from inspector import teaching
from inspector.preferences import preference_set
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.mark.parametrize(
    ("text", "html"),
    [
        ("the model can only *select* one", "the model can only <em>select</em> one"),
        ("**never** sent", "<strong>never</strong> sent"),
        ("sends `tools/call`", "sends <code>tools/call</code>"),
        ("`*not emphasis*` here", "<code>*not emphasis*</code> here"),
        ("2 * 3 * 4 and a lone * star", "2 * 3 * 4 and a lone * star"),
        ("<script>alert(1)</script> *x*", "&lt;script&gt;alert(1)&lt;/script&gt; <em>x</em>"),
        ('`<img src=x onerror="y">`', "<code>&lt;img src=x onerror=&quot;y&quot;&gt;</code>"),
        ("*<b>bold</b>*", "<em>&lt;b&gt;bold&lt;/b&gt;</em>"),
        ("a NUL \x000\x00 slot and `c`", "a NUL 0 slot and <code>c</code>"),
        ("the model's own", "the model&#x27;s own"),
    ],
    ids=[
        "emphasis",
        "strong",
        "code",
        "code is literal",
        "arithmetic is not emphasis",
        "a script is text",
        "markup in code is text",
        "markup in emphasis is text",
        "a smuggled slot is dropped",
        "quotes are escaped",
    ],
)
def test_a_notes_markdown_becomes_tags_after_everything_is_escaped(text: str, html: str) -> None:
    assert teaching.note_html(text) == html


def _every_note_text() -> Iterator[str]:
    shipped = teaching.notes()
    for notes in shipped.fields.values():
        yield from (note.text for note in notes.values())
    yield from shipped.roles.values()
    yield from shipped.steps.values()
    yield from shipped.layers.values()
    yield from (note.text for note in shipped.calls.values())
    yield from (note.text for note in shipped.exchanges.values())
    yield from shipped.tool_choice.values()


def test_no_shipped_note_shows_a_raw_markdown_mark_or_a_tag_of_its_own() -> None:
    texts = list(_every_note_text())
    assert any("*" in text for text in texts), "the notes use emphasis (the test would check nothing)"
    for text in texts:
        rendered = teaching.note_html(text)
        assert "*" not in rendered and "`" not in rendered, text
        assert set(re.findall(r"</?([a-z]+)", rendered)) <= {"em", "strong", "code"}, text


@pytest.fixture
def _sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _page(user: Any, public_id: object) -> str:
    client = Client()
    client.force_login(user)
    return client.get(reverse("inspector-conversation", args=[public_id])).content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_sessions")
def test_a_teaching_page_folds_each_field_table_to_one_line_and_renders_its_notes() -> None:
    alice = UserFactory(username="alice")
    preference_set(user=alice, teaching=True)
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=WEATHER,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)

    text = _page(alice, conversation.public_id)

    tables = re.findall(r"<details class=\"teach teach-fields\"[^>]*>", text)
    assert tables, "teaching mode lists the fields"
    assert not [table for table in tables if " open" in table]
    assert "<em>selects</em>" in text or "<em>select</em>" in text
    assert "*select" not in text and "select*" not in text


@pytest.mark.django_db(transaction=True)
def test_the_class_view_is_remembered_per_user_and_offered_in_teaching_mode() -> None:
    alice, bob = UserFactory(username="alice"), UserFactory(username="bob")
    as_alice = Client()
    as_alice.force_login(alice)
    as_bob = Client()
    as_bob.force_login(bob)
    assert 'id="class-view-toggle"' not in as_alice.get("/").content.decode()
    preference_set(user=alice, teaching=True)
    assert 'id="class-view-toggle"' in as_alice.get("/").content.decode()

    kept = as_alice.post(
        reverse("inspector-preferences"), {"class_view": "on"}, HTTP_X_REQUESTED_WITH="fetch"
    )
    bad = as_alice.post(reverse("inspector-preferences"), {"class_view": "yes"})

    assert kept.status_code == 204
    assert bad.status_code == 400
    assert 'data-class-view="on"' in as_alice.get("/").content.decode()
    assert 'data-class-view="off"' in as_bob.get("/").content.decode()
    preference = UserPreference.objects.get(user=alice)
    assert preference.class_view is True and preference.teaching is True
    as_alice.post(reverse("inspector-preferences"), {"class_view": "off"})
    assert 'data-class-view="off"' in as_alice.get("/").content.decode()


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("_sessions")
def test_an_error_row_the_host_recovered_from_says_the_turn_went_on() -> None:
    alice = UserFactory(username="alice")
    preference_set(user=alice, teaching=True)
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question="[demo:no-native-tools] " + WEATHER,
        servers=[demo_server_ensure()],
        paradigm="auto",
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    error = Step.objects.filter(turn=turn, kind="error").order_by("seq").first()
    assert error is not None, "the refused rung is recorded as an error row"
    assert Step.objects.filter(turn=turn, kind="fallback").exists()
    assert Step.objects.filter(turn=turn, seq__gt=error.seq).exists(), "the turn went on after it"

    text = _page(alice, conversation.public_id)
    row = text[text.index(f'id="step-{error.pk}"') :]
    note = re.search(r'<p class="teach teach-step">(.*?)</p>', row)

    assert note is not None
    assert "the turn went on" in note.group(1)
    assert "ended here" not in note.group(1) and "could not go on" not in note.group(1)
    walk = Client()
    walk.force_login(alice)
    slides = [
        walk.get(
            reverse("inspector-turn-walk", args=[conversation.public_id, turn.pk]), {"at": at}
        ).content.decode()
        for at in range(1, 12)
    ]
    error_slides = [slide for slide in slides if 'data-layer="error"' in slide]
    assert error_slides and all("the turn went on" in slide for slide in error_slides)


def test_an_error_rows_note_follows_what_came_next() -> None:
    assert "went on" in teaching.step_note("error", went_on=True)
    assert "ended here" in teaching.step_note("error", went_on=False)
    unknown = teaching.step_note("error", went_on=None)
    assert "went on" not in unknown and "ended here" not in unknown
    assert teaching.step_note("decide") == teaching.STEP_NOTES["decide"]


def test_a_recorded_name_in_a_rows_note_is_shown_as_it_is_never_as_marks() -> None:
    roles = teaching.exchange_roles(
        channel="mcp", direction="client", label="tools/call", server="*srv*<b>`x`"
    )

    assert "*srv*&lt;b&gt;`x`" in roles.html
    assert "<em>" not in roles.html and "<b>" not in roles.html and "<code>" not in roles.html
    assert roles.text.count("*srv*<b>`x`") == roles.html.count("*srv*&lt;b&gt;`x`") >= 1
