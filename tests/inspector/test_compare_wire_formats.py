"""The compare view's wire-format section: one tool call, and the result sent back, in each
provider's own format side by side; and the "compare providers" action that sets it up. Real
runs: the demo model in each format (in-process), the demo MCP server over stdio."""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest
from django.test import Client
from django.urls import reverse

from conversations.loop.providers import PROVIDERS
from conversations.models import AuditEvent, Comparison, Exchange, Turn
from conversations.presentation import json_marked
from conversations.runner import turn_run
from conversations.services import comparison_providers_start
from servers import gateway
from servers.services import demo_server_ensure
from tests.factories import ConversationFactory, TurnFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"
# What each format's column must hold: its own keys for the call and for the result message.
FORMAT_KEYS = {
    "openai_chat": ['"tool_calls": [', '"type": "function"', '"role": "tool"', '"tool_call_id": '],
    "openai_responses": ['"type": "function_call"', '"type": "function_call_output"', '"call_id": '],
    "anthropic": ['"type": "tool_use"', '"input": {', '"type": "tool_result"', '"tool_use_id": '],
    "gemini": ['"functionCall": {', '"args": {', '"functionResponse": {', '"response": {'],
}
# Keys of the other formats that must not appear in a column.
FOREIGN_KEYS = {
    "openai_chat": ["tool_use", "functionCall", "function_call_output"],
    "openai_responses": ["tool_use", "functionCall", '"role": "tool"'],
    "anthropic": ["tool_calls", "functionCall", "function_call_output"],
    "gemini": ["tool_calls", "tool_use", "function_call_output"],
}


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture
def alice() -> Any:
    return UserFactory(username="alice")


def _compared(owner: Any, *, stream: bool) -> Comparison:
    comparison, turns = comparison_providers_start(
        owner=owner, question=WEATHER, stream=stream, servers=[demo_server_ensure()], dispatch=False
    )
    for turn in turns:
        turn_run(turn_id=turn.pk)
    return comparison


def _columns(page: str) -> dict[str, str]:
    """Each wire-format column's HTML, by its provider key."""
    found = re.findall(r'<article class="wire-column" data-provider="([a-z_]+)">(.*?)</article>', page, re.S)
    return dict(found)


def _marks(column: str, role: str) -> list[str]:
    return [
        html.unescape(text) for text in re.findall(rf'<mark class="wire-{role}">(.*?)</mark>', column, re.S)
    ]


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_the_weather_call_is_shown_in_all_four_formats_with_the_matching_parts_marked(
    client: Client, alice: Any, stream: bool
) -> None:
    comparison = _compared(alice, stream=stream)
    assert [turn.status for turn in Turn.objects.filter(conversation__comparison=comparison)] == ["done"] * 4
    client.force_login(alice)

    page = client.get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()

    columns = _columns(page)
    assert list(columns) == list(PROVIDERS)
    for provider, column in columns.items():
        text = html.unescape(column)
        for key in FORMAT_KEYS[provider]:
            assert key in text, (provider, key)
        for key in FOREIGN_KEYS[provider]:
            assert key not in text, (provider, key)
        assert "demo__get_weather_forecast" in " ".join(_marks(column, "name")), provider
        arguments = " ".join(_marks(column, "arguments"))
        assert "Beijing" in arguments and "tomorrow" in arguments, provider
        assert ("streamed" in text) is stream, provider
    # The call id marks pair the call with its result (Gemini's demo calls carry ids too).
    for provider in ("openai_chat", "openai_responses", "anthropic"):
        ids = {mark.split(": ")[-1] for mark in _marks(columns[provider], "id")}
        assert len(ids) == 1, (provider, ids)
    # The reply sent whole shows the call as the model sent it; a stream points at its events.
    for provider, column in columns.items():
        assert ('class="body wire-json wire-sent"' in column) is not stream, provider


def test_an_error_result_has_its_is_error_flag_marked(client: Client, alice: Any) -> None:
    comparison = _compared(alice, stream=False)
    client.force_login(alice)
    anthropic_run = comparison.conversations.get(model_profile__provider="anthropic")
    follow_up = Exchange.objects.filter(turn__conversation=anthropic_run, channel="llm").order_by("seq")[1]
    body = json.loads(follow_up.request_body)
    body["messages"][-1]["content"][0]["is_error"] = True
    Exchange.objects.filter(pk=follow_up.pk).update(request_body=json.dumps(body))

    page = client.get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()

    assert _marks(_columns(page)["anthropic"], "error") == ['"is_error": true']


def test_tool_output_in_a_body_is_shown_as_text_never_run(client: Client, alice: Any) -> None:
    comparison = _compared(alice, stream=False)
    client.force_login(alice)
    chat_run = comparison.conversations.get(model_profile__provider="openai_chat")
    follow_up = Exchange.objects.filter(turn__conversation=chat_run, channel="llm").order_by("seq")[1]
    body = json.loads(follow_up.request_body)
    tool_message = next(m for m in body["messages"] if m["role"] == "tool")
    tool_message["content"] = '<script>alert("pwned")</script><img src=x onerror=alert(1)>'
    Exchange.objects.filter(pk=follow_up.pk).update(request_body=json.dumps(body))

    page = client.get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()

    assert "<script>alert" not in page and "<img src=x" not in page
    assert "&lt;script&gt;alert(\\&quot;pwned\\&quot;)&lt;/script&gt;" in page


def test_bob_gets_404_for_alices_wire_formats_on_the_page_and_the_summary(client: Client, alice: Any) -> None:
    comparison, _ = comparison_providers_start(
        owner=alice, question=WEATHER, stream=False, servers=[demo_server_ensure()], dispatch=False
    )
    client.force_login(UserFactory(username="bob"))

    for name in ("inspector-comparison", "inspector-comparison-summary"):
        assert client.get(reverse(name, args=[comparison.public_id])).status_code == 404


def test_the_summary_fragment_carries_the_section_so_it_appears_live(client: Client, alice: Any) -> None:
    comparison = _compared(alice, stream=False)
    client.force_login(alice)

    summary = client.get(
        reverse("inspector-comparison-summary", args=[comparison.public_id])
    ).content.decode()

    assert list(_columns(summary)) == list(PROVIDERS)


def test_runs_without_a_tool_call_have_no_column_and_no_section(client: Client, alice: Any) -> None:
    comparison, turns = comparison_providers_start(
        owner=alice,
        question="[demo:no-tool] " + WEATHER,
        stream=False,
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    for turn in turns:
        turn_run(turn_id=turn.pk)
    client.force_login(alice)

    page = client.get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()

    assert 'id="wire-formats"' not in page
    assert "Beijing" in page


# --- the "compare providers" action ------------------------------------------------------------


@pytest.mark.django_db  # on commit inside the test's transaction: captured, not dispatched
@pytest.mark.parametrize("stream", [False, True])
def test_compare_providers_starts_one_native_run_per_format(
    client: Client, alice: Any, stream: bool, django_capture_on_commit_callbacks: Any
) -> None:
    client.force_login(alice)
    data = {"question": WEATHER, **({"stream": "on"} if stream else {})}

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client.post(reverse("inspector-comparison-providers"), data)

    comparison = Comparison.objects.get()
    assert response.status_code == 302
    assert response["Location"] == reverse("inspector-comparison", args=[comparison.public_id])
    runs = list(comparison.conversations.order_by("pk"))
    assert [run.model_profile.provider for run in runs] == list(PROVIDERS)
    assert {(run.paradigm, run.model_profile.is_demo, run.model_profile.stream) for run in runs} == {
        ("native", True, stream)
    }
    assert all([server.name for server in run.servers.all()] == ["demo"] for run in runs)
    assert len(callbacks) == 4


def test_compare_providers_is_offered_on_the_list_with_the_weather_question(
    client: Client, alice: Any
) -> None:
    client.force_login(alice)

    page = client.get(reverse("inspector-comparisons")).content.decode()

    assert 'id="compare-providers"' in page
    assert reverse("inspector-comparison-providers") in page
    assert WEATHER in page


def test_compare_providers_needs_a_question(client: Client, alice: Any) -> None:
    client.force_login(alice)

    response = client.post(reverse("inspector-comparison-providers"), {"question": ""})

    assert response.status_code == 400
    assert not Comparison.objects.exists()


def test_compare_providers_needs_a_login(client: Client) -> None:
    response = client.post(reverse("inspector-comparison-providers"), {"question": WEATHER})

    assert response.status_code == 302 and "/accounts/login/" in response["Location"]
    assert not Comparison.objects.exists()


def test_json_is_cut_into_pieces_marked_by_the_nearest_key() -> None:
    pieces = json_marked(
        {"name": "f", "args": {"city": "Paris"}, "x": [1]}, {"name": "name", "args": "arguments"}
    )

    assert "".join(text for text, _ in pieces) == json.dumps(
        {"name": "f", "args": {"city": "Paris"}, "x": [1]}, indent=2
    )
    assert [role for _, role in pieces] == ["", "name", "", "arguments", ""]


def test_a_turn_links_to_compare_providers_with_its_question_filled_in(client: Client, alice: Any) -> None:
    question = 'Convert 3 miles to km <b>"now"</b> [demo:code-fence]'
    conversation = ConversationFactory(owner=alice)
    turn = TurnFactory(conversation=conversation, question=question)
    client.force_login(alice)

    page = client.get(reverse("inspector-conversation", args=[conversation.public_id])).content.decode()
    link = re.search(r'<a class="[^"]*providers-link[^"]*" href="([^"]+)"', page)
    assert link is not None
    target = html.unescape(link.group(1))
    assert target == (
        f"{reverse('inspector-comparisons')}?from={conversation.public_id}&turn={turn.pk}#compare-providers"
    )
    form = client.get(target.split("#")[0]).content.decode().split('id="compare-providers"', 1)[1]

    # The question is in the providers form, escaped like any text of a user's.
    textarea = re.search(r"<textarea[^>]*>(.*?)</textarea>", form, re.S)
    assert textarea is not None and html.unescape(textarea.group(1)).strip() == question
    assert "<b>" not in textarea.group(1)
    assert AuditEvent.objects.filter(via="compare providers", subject=f"turn {turn.seq}").exists()


def test_another_users_turn_cannot_fill_in_compare_providers(client: Client, alice: Any) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = TurnFactory(conversation=conversation, question="ALICE-ONLY question")
    client.force_login(UserFactory(username="bob"))

    missing = client.get(reverse("inspector-comparisons"), {"from": conversation.public_id, "turn": turn.pk})
    malformed = client.get(reverse("inspector-comparisons"), {"from": "not-a-uuid", "turn": "x"})

    assert missing.status_code == 404 and b"ALICE-ONLY" not in missing.content
    assert malformed.status_code == 404
