"""Teaching mode's note on a spliced prompt says what its label says: the text the model reads only
when the prompt is exact; an illustrative rendering, the messages as sent, a warning or a failed
template are never "the text the model actually reads". One function gives the note
(``inspector.teaching.prompt_layer``), for Compare's "What was sent", the conversation page and
the step-through. Real runs: the demo model in-process in each provider format, the demo MCP
server over stdio."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse

from conversations.loop.splicing.templates import GENERIC_SOURCE, PARADIGM_SOURCE
from conversations.runner import turn_run
from conversations.services import comparison_providers_start
from inspector import teaching
from inspector.preferences import preference_set
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"
READS = "the text the model actually reads"
# The badge's label, and the teaching note the same include renders for it.
BADGE = re.compile(r'<span class="badge prompt-[a-z-]+(?: prompt-[a-z-]+)?"[^>]*>([^<]*)</span>')
NOTE = re.compile(r'<p class="teach teach-layer teach-prompt" data-prompt-label="([a-z ]+)">(.*?)</p>', re.S)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _text(fragment: str) -> str:
    return html.unescape(re.sub(r"<[^>]+>", "", fragment))


def test_only_an_exact_prompt_is_called_the_text_the_model_reads() -> None:
    assert READS in teaching.prompt_layer("exact")
    for label in ("illustrative", "as sent", "warning", "failed"):
        note = teaching.prompt_layer(label)
        assert "actually reads" not in note and "not the text the model reads" in note, label
    assert "known format" in teaching.prompt_layer("illustrative")
    assert "its own chat template" in teaching.prompt_layer("as sent")
    # Every label has its own note; a label no code gives gets the note true of every prompt.
    notes = [teaching.prompt_layer(label) for label in teaching.PROMPT_LABELS]
    assert len(set(notes)) == len(notes)
    assert teaching.prompt_layer("as-sent") == teaching.prompt_layer("as sent")
    assert teaching.prompt_layer("no such label") == teaching.LAYERS["prompt"]
    assert "actually reads" not in teaching.LAYERS["prompt"]


@pytest.mark.parametrize(
    ("exact", "source", "label"),
    [
        (True, "the profile's chat template", "exact"),
        (False, GENERIC_SOURCE, "illustrative"),
        (
            False,
            "generic ChatML template (illustrative) — the server's template is an Ollama Go template",
            "illustrative",
        ),
        (False, PARADIGM_SOURCE, "as sent"),
        (True, "the messages as the paradigm wrote them", "as sent"),
        (
            False,
            "the profile's chat template — warning: <|im_end|> not configured, rendered empty (not exact)",
            "warning",
        ),
        (
            False,
            "failed: the profile's chat template: boom — shown instead: the generic ChatML template (illustrative)",
            "failed",
        ),
        (False, "the span's gen_ai.input.messages (a trace holds no prompt text)", "illustrative"),
    ],
)
def test_the_badge_and_the_note_read_one_label_from_the_record(exact: bool, source: str, label: str) -> None:
    badge = render_to_string("inspector/_prompt_badge.html", {"exact": exact, "source": source})
    note = render_to_string("inspector/_prompt_badge.html", {"exact": exact, "source": source, "note": True})

    assert teaching.prompt_label(exact=exact, source=source) == label
    assert BADGE.findall(badge)[0].split(" — ")[0] == label
    found = NOTE.findall(note)
    assert [(shown, _text(text)) for shown, text in found] == [
        (label, _text(teaching.note_html(teaching.prompt_layer(label))))
    ]


@pytest.mark.django_db(transaction=True)
def test_compare_and_the_conversation_page_note_an_illustrative_prompt_as_illustrative() -> None:
    alice = UserFactory(username="alice")
    comparison, turns = comparison_providers_start(
        owner=alice, question=WEATHER, stream=False, servers=[demo_server_ensure()], dispatch=False
    )
    for turn in turns:
        turn_run(turn_id=turn.pk)
    preference_set(user=alice, teaching=True)
    client = Client()
    client.force_login(alice)

    page = client.get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()
    runs = re.findall(r'<article class="sent-run".*?</article>', page, re.S)

    labels: list[str] = []
    for run in runs:
        head = re.search(r'<div class="sent-prompt">.*?</h4>', run, re.S)
        assert head is not None
        label = html.unescape(BADGE.findall(head.group(0))[0]).split(" — ")[0]
        notes = NOTE.findall(run)
        assert [shown for shown, _ in notes] == [label], run
        if label == "exact":
            assert READS in _text(notes[0][1])
        else:
            assert "not the text the model reads" in _text(notes[0][1])
            assert "actually reads" not in _text(run)
        labels.append(label)
    # The provider formats without a known template (Anthropic, Gemini, Responses) are illustrative;
    # Chat Completions carries the demo's template: both kinds are on the page.
    assert labels.count("illustrative") == 3 and "exact" in labels, labels

    for turn in turns:
        text = client.get(
            reverse("inspector-conversation", args=[turn.conversation.public_id])
        ).content.decode()
        sections = re.findall(r'<section class="spliced".*?</section>', text, re.S)
        assert sections
        for section in sections:
            label = html.unescape(BADGE.findall(section)[0]).split(" — ")[0]
            notes = NOTE.findall(section)
            assert [shown for shown, _ in notes] == [label]
            assert (READS in _text(notes[0][1])) == (label == "exact")
