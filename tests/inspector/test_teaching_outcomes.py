"""Teaching mode's notes follow what happened to each call, read from the record (never from the
step's kind alone): every demo scenario that selects a call is run with teaching on, and each
tool step's note is checked against its stored outcome. Real runs: the demo model in-process,
the demo MCP server over stdio."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Exchange, Step
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from inspector import teaching
from inspector.preferences import preference_set
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.mark.parametrize(
    ("fields", "sent", "outcome"),
    [
        ({"status": "ok", "error": "", "is_error": False}, True, "execute"),
        ({"status": "error", "error": "", "is_error": True}, True, "tool_error"),
        ({"status": "running", "error": "", "is_error": False}, True, "running"),
        ({"status": "error", "error": "not sent: unknown tool 'x'", "is_error": True}, False, "refused"),
        ({"status": "error", "error": "timed out after 30 s", "is_error": True}, True, "failed"),
        (
            {
                "status": "error",
                "error": "cancelled by the user (the server was sent notifications/cancelled)",
                "is_error": True,
            },
            True,
            "cancelled",
        ),
        ({"status": "ok", "error": "", "is_error": False}, False, "recorded"),
    ],
)
def test_a_calls_outcome_is_read_from_its_record(fields: dict[str, Any], sent: bool, outcome: str) -> None:
    assert teaching.call_outcome(sent=sent, **fields) == outcome
    mark, note = teaching.call_note(outcome)
    assert mark and note.text
    # Only a call that reached the server and came back is said to have run.
    assert ("ran the tool" in note.text) == (outcome in {"execute", "tool_error"})


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "scenario",
    ["", "[demo:malformed-json] ", "[demo:unknown-tool] ", "[demo:missing-argument] "],
)
@pytest.mark.parametrize("paradigm", ["native", "prompt_xml", "prompt_json", "structured", "intent"])
def test_every_tool_rows_note_says_what_the_record_says_happened(scenario: str, paradigm: str) -> None:
    alice = UserFactory(username="alice")
    preference_set(user=alice, teaching=True)
    _, turn = conversation_start(
        owner=alice,
        model_profile=demo_profile_ensure(),
        question=scenario + WEATHER,
        servers=[demo_server_ensure()],
        paradigm=paradigm,
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    client = Client()
    client.force_login(alice)
    text = client.get(reverse("inspector-conversation", args=[turn.conversation.public_id])).content.decode()

    tools = list(Step.objects.filter(turn=turn, kind="tool").order_by("seq"))
    assert tools, "the scenario selects at least one call"
    for child in tools:
        block = text[text.index(f'id="tool-step-{child.pk}"') :]
        block = block[: block.index("</header>") + 400]
        shown = re.search(r'data-outcome="([a-z_]+)"', block)
        assert shown is not None, block
        sent = Exchange.objects.filter(step=child, label="tools/call").exists()
        if child.error.startswith("not sent:"):
            assert shown.group(1) == "refused" and not sent
            assert "NOT EXECUTED" in block and "ran the tool" not in block
        else:
            assert sent and shown.group(1) in {"execute", "tool_error"}
            assert "EXECUTE" in block
    if scenario and paradigm == "native":
        # The repair lesson: the first call was refused before anything was sent (a prompt
        # paradigm's malformed text is repaired in the model step itself: no call to refuse).
        assert tools[0].error.startswith("not sent:")
    # A model HTTP call is Host → Model, never "client → server" (MCP's roles).
    assert 'class="ex-direction">host → model<' in text
