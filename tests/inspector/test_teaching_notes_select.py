"""Teaching mode's SELECT note fits the paradigm: native function calling is named only for a call
the API returned in its own tool-call field; a call the model wrote in its text as the prompt told
it to, a structured-output reply and a recognised intent are not function calling, and their note
never links the function-calling guide. Where a page does not know the paradigm, the note claims
none. Real runs: the demo model in-process, the demo MCP server over stdio."""

from __future__ import annotations

import html
import re
from collections.abc import Iterator

import pytest
from django.test import Client
from django.urls import reverse

from conversations.loop.paradigms import PARADIGMS
from conversations.runner import turn_run
from conversations.services import comparison_start, demo_profile_ensure
from inspector import teaching
from inspector.preferences import preference_set
from inspector.teaching.loading import notes_load
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"
FUNCTION_CALLING_GUIDES = {
    "https://platform.openai.com/docs/guides/function-calling",
    "https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use",
    "https://ai.google.dev/gemini-api/docs/function-calling",
}
NOT_NATIVE = ("prompt_xml", "prompt_json", "structured", "intent")


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def test_only_the_native_paradigms_select_note_is_function_calling() -> None:
    native = teaching.select_note("native")
    assert native.text.startswith("Native function calling")
    assert native.spec == "https://platform.openai.com/docs/guides/function-calling"
    # Each provider's own guide for its own format.
    assert teaching.select_note("native", "anthropic").spec in FUNCTION_CALLING_GUIDES - {native.spec}
    assert (
        teaching.select_note("native", "gemini").spec
        == "https://ai.google.dev/gemini-api/docs/function-calling"
    )
    for paradigm in NOT_NATIVE:
        for fmt in ("", *teaching.FORMATS):
            note = teaching.select_note(paradigm, fmt)
            assert "(function calling)" not in note.text and not note.text.startswith("Native"), paradigm
            assert "not function calling" in note.text.lower(), paradigm
            assert note.spec not in FUNCTION_CALLING_GUIDES, (paradigm, fmt)
    assert "in its text" in teaching.select_note("prompt_xml").text
    assert "`<function_calls>`" in teaching.select_note("prompt_xml").text
    assert "JSON Schema" in teaching.select_note("structured").text
    assert (
        teaching.select_note("structured", "gemini").spec
        == "https://ai.google.dev/gemini-api/docs/structured-output"
    )
    assert "classif" in teaching.select_note("intent").text
    # Every paradigm a run can have is known, and each has its own note.
    rungs = set(PARADIGMS) - {"auto"}
    assert len({teaching.select_note(paradigm).text for paradigm in rungs}) == len(rungs)


def test_where_the_paradigm_is_not_known_the_select_note_claims_none() -> None:
    for note in (teaching.SELECT_NOTE, teaching.select_note("auto"), teaching.select_note("proxy")):
        assert "(function calling)" not in note.text and not note.text.startswith("Native")
        assert note.spec not in FUNCTION_CALLING_GUIDES
        assert "ran nothing" in note.text
    assert notes_load().calls["select"] == teaching.SELECT_NOTE


@pytest.mark.django_db(transaction=True)
def test_a_prompt_structured_or_intent_rows_select_note_is_not_function_calling() -> None:
    alice = UserFactory(username="alice")
    profile = demo_profile_ensure()
    _, turns = comparison_start(
        owner=alice,
        question=WEATHER,
        runs=[(profile, paradigm) for paradigm in NOT_NATIVE],
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    for turn in turns:
        turn_run(turn_id=turn.pk)
    preference_set(user=alice, teaching=True)
    client = Client()
    client.force_login(alice)

    for turn in turns:
        page = client.get(
            reverse("inspector-conversation", args=[turn.conversation.public_id])
        ).content.decode()
        selects = re.findall(r'<p class="teach teach-select">.*?</p>', page, re.S)
        assert selects, turn.paradigm
        for select in selects:
            text = html.unescape(re.sub(r"<[^>]+>", "", select))
            assert "(function calling)" not in text, (turn.paradigm, text)
            assert not any(guide in select for guide in FUNCTION_CALLING_GUIDES), (turn.paradigm, select)
        legend = re.search(r'<aside class="teach teach-legend".*?</aside>', page, re.S)
        assert legend is not None
        assert "Function calling selects" not in legend.group(0)
