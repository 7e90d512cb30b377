"""Honest tokens and cost: every count is of the text the model receives — the structured
paradigm's prompt count includes the json_schema it sends; one tool counts the same on the server
page and in a conversation; the tool definitions and a comparison have a cost at the profile's
prices. Real runs: the demo model in-process, the demo MCP server over stdio."""

from __future__ import annotations

import json
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from conversations.models import Step
from conversations.pricing import comparison_cost, profile_price_set, tool_definitions_cost
from conversations.runner import turn_run
from conversations.selectors import comparison_runs
from conversations.services import comparison_start, demo_profile_ensure
from conversations.splicing import count_tokens
from servers import gateway
from servers.models import Operation
from servers.selectors import server_tool_reports
from servers.services import demo_server_ensure, operation_start
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def _compare(owner: object) -> object:
    profile = demo_profile_ensure()
    comparison, turns = comparison_start(
        owner=owner,  # type: ignore[arg-type]
        question=WEATHER,
        runs=[(profile, "native"), (profile, "structured"), (profile, "prompt_xml")],
        servers=[demo_server_ensure()],
        dispatch=False,
    )
    for turn in turns:
        turn_run(turn_id=turn.pk)
    return comparison


def test_the_structured_prompt_count_includes_the_json_schema_it_sends() -> None:
    alice = UserFactory(username="alice")
    comparison = _compare(alice)

    structured = Step.objects.filter(
        turn__conversation__comparison=comparison, turn__conversation__paradigm="structured", kind="decide"
    ).first()
    assert structured is not None
    request = json.loads(structured.exchanges.get(channel="llm").request_body)
    schema = request["response_format"]
    schema_tokens = count_tokens(json.dumps(schema, ensure_ascii=False), structured.tokens["encoding"])
    assert structured.tokens["tools"]["response_format"] == schema_tokens
    assert structured.tokens["prompt"] > schema_tokens
    assert "response_format" in structured.tokens["note"]


def test_one_tool_counts_the_same_on_the_server_page_and_in_a_conversation() -> None:
    alice = UserFactory(username="alice")
    comparison = _compare(alice)
    native = Step.objects.filter(
        turn__conversation__comparison=comparison, turn__conversation__paradigm="native", kind="decide"
    ).first()
    assert native is not None
    in_conversation = native.tokens["tools"]
    server = demo_server_ensure()
    operation_start(server=server, user=alice, kind=Operation.Kind.TOOLS_LIST)
    _, reports, _ = server_tool_reports(server=server, user=alice)

    assert len(reports) >= 3
    for report in reports:
        assert report.tokens is not None
        assert report.tokens == in_conversation[f"{server.name}__{report.name}"], report.name


def test_the_tool_definitions_and_a_comparison_cost_at_the_profiles_prices() -> None:
    alice = UserFactory(username="alice")
    profile = demo_profile_ensure()
    profile_price_set(
        profile=profile,
        input_per_million=Decimal("2"),
        output_per_million=Decimal("8"),
        source="a test",
        actor=alice,
    )
    comparison = _compare(alice)
    runs = comparison_runs(comparison=comparison)

    total = comparison_cost([(run.turn, run.conversation.model_profile) for run in runs])
    assert total is not None
    definitions = {
        run.paradigm: tool_definitions_cost(run.turn, run.conversation.model_profile) for run in runs
    }
    # native sends its tools' definitions, structured its schema; prompt_xml writes its tools into
    # its own system prompt, where they are part of the prompt's count, not listed apart.
    assert definitions["native"] is not None and definitions["native"] > 0
    assert definitions["structured"] is not None and definitions["structured"] > 0
    assert definitions["prompt_xml"] is None
    assert total > definitions["native"] + definitions["structured"]

    client = Client()
    client.force_login(alice)
    text = client.get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()
    assert f"${total:.6f}" in text
    assert 'class="num tool-definitions-cost"' in text
