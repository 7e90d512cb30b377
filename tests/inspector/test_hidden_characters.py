"""Audit text cannot lie: every field of a record that a page shows holds its invisible and
bidirectional characters as marked escapes, with a note on the row, while the stored record and
the raw download keep them exactly."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse

from conversations.models import Step
from inspector.templatetags.inspector_tags import marked, payload, revealed, step_hidden
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory, UserFactory

pytestmark = pytest.mark.django_db

OVERRIDE = "Final answer \u202eevil\u202c done"
CITY = "Bei\u202ejing\u202c"
NOTE = "invisible or bidirectional characters"


@pytest.fixture
def alice() -> User:
    return UserFactory(username="alice")


def _conversation(owner: User) -> tuple[str, Step]:
    conversation = ConversationFactory(owner=owner, title=f"Weather in {CITY}")
    turn = TurnFactory(conversation=conversation, question=f"Weather in {CITY}?", answer=OVERRIDE)
    decide = StepFactory(
        turn=turn,
        title="calls get_forecast",
        calls=[{"name": "get_forecast", "arguments": {"city": CITY}, "valid": True}],
    )
    ExchangeFactory(
        step=decide,
        response_body=json.dumps({"choices": [{"message": {"content": OVERRIDE}}]}, ensure_ascii=False),
    )
    answer = StepFactory(turn=turn, kind="answer", title="answers", text=OVERRIDE)
    return reverse("inspector-conversation", args=[conversation.public_id]), answer


def test_the_page_shows_markers_and_no_control_takes_effect(alice: User) -> None:
    url, _ = _conversation(alice)
    client = Client()
    client.force_login(alice)
    page = client.get(url).content.decode()

    assert "\u202e" not in page and "\u202c" not in page
    assert 'Bei<span class="hidden-char" title="U+202E RIGHT-TO-LEFT OVERRIDE">⟨U+202E⟩</span>jing' in page
    assert "<title>Weather in Bei⟨U+202E⟩jing⟨U+202C⟩" in page
    assert NOTE in page


def test_the_stored_record_and_the_raw_body_keep_the_characters(alice: User) -> None:
    url, answer = _conversation(alice)
    client = Client()
    client.force_login(alice)
    client.get(url)
    answer.refresh_from_db()
    assert answer.text == OVERRIDE
    exchange = answer.turn.exchanges.get()
    raw = client.get(
        reverse("inspector-exchange-body", args=[answer.turn.conversation.public_id, exchange.pk]),
        {"part": "response", "raw": "1"},
    )
    assert raw.content.decode() == exchange.response_body
    assert "\u202e" in raw.content.decode()


def test_a_payload_with_hidden_characters_carries_the_note_and_a_plain_one_does_not() -> None:
    hidden = render_to_string("inspector/_json.html", payload({"city": CITY}))
    plain = render_to_string("inspector/_json.html", payload({"city": "Beijing"}))
    assert NOTE in hidden and "⟨U+202E⟩" in hidden and "\u202e" not in hidden
    assert NOTE not in plain and "hidden-char" not in plain


def test_revealed_text_is_escaped_first() -> None:
    shown = revealed("<b>\u200b</b>")
    assert shown.startswith('&lt;b&gt;<span class="hidden-char"')
    assert marked("a\u2066b") == "a⟨U+2066⟩b"


def test_a_step_is_flagged_by_any_field_it_shows(alice: User) -> None:
    _, answer = _conversation(alice)
    assert step_hidden(answer)
    answer.text = "plain"
    assert not step_hidden(answer)
    answer.calls = [{"name": "x", "arguments": {"city": CITY}}]
    assert step_hidden(answer)
