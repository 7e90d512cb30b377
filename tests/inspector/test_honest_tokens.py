"""Honest tokens and cost: every count is of the text the model receives — the structured
paradigm's prompt count includes the json_schema it sends; one tool counts the same on the server
page and in a conversation; the tool definitions and a comparison have a cost at the profile's
prices. Real runs: the demo model in-process, the demo MCP server over stdio."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.test import Client
from django.urls import reverse

from conversations.loop.splicing import count_tokens
from conversations.models import ModelProfile, Step
from conversations.pricing import comparison_cost, profile_price_set, tool_definitions_cost
from conversations.runner import turn_run
from conversations.selectors import comparison_runs
from conversations.services import comparison_start, conversation_start, demo_profile_ensure
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


PARADIGMS = ("native", "structured", "prompt_json", "prompt_xml", "intent")


def _compare(
    owner: object,
    paradigms: tuple[str, ...] = ("native", "structured", "prompt_xml"),
    profile: ModelProfile | None = None,
) -> object:
    profile = profile or demo_profile_ensure()
    comparison, turns = comparison_start(
        owner=owner,  # type: ignore[arg-type]
        question=WEATHER,
        runs=[(profile, paradigm) for paradigm in paradigms],
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
    assert structured.tokens["prompt"] > schema_tokens
    assert f"response_format schema the request sends ({schema_tokens})" in structured.tokens["note"]


def test_the_structured_paradigm_counts_each_tool_as_its_branch_of_the_schema_and_its_prompt_line() -> None:
    alice = UserFactory(username="alice")
    comparison = _compare(alice, ("native", "structured"))
    step = (
        Step.objects.filter(
            turn__conversation__comparison=comparison,
            turn__conversation__paradigm="structured",
            kind="decide",
        )
        .order_by("seq")
        .first()
    )
    assert step is not None
    request = json.loads(step.exchanges.get(channel="llm").request_body)
    encoding, counts = step.tokens["encoding"], step.tokens["tools"]
    branches = {
        branch["properties"]["tool"]["enum"][0]: branch
        for branch in request["response_format"]["json_schema"]["schema"]["properties"]["decision"]["anyOf"]
        if "tool" in branch["properties"]
    }
    listed = request["messages"][0]["content"].split("- Tools: ", 1)[1].split("\n", 1)[0]

    # One count per tool offered (no lump for the whole schema), as for every other paradigm.
    assert set(counts) == set(branches) and len(counts) >= 3
    for name, branch in branches.items():
        # Its entry in the prompt's tool list (up to the next tool's) and its branch of the union.
        others = [other for other in branches if other != name]
        line = listed.split(f"{name} (", 1)[1]
        line = f"{name} (" + min((line.split(f"; {other} (")[0] for other in others), key=len)
        text = f"{line}\n{json.dumps(branch, ensure_ascii=False)}"
        assert counts[name] == count_tokens(text, encoding), name
    schema_tokens = count_tokens(json.dumps(request["response_format"], ensure_ascii=False), encoding)
    # The tools are part of what the model reads, not all of it: the answer branch and wrapper are not tools.
    assert sum(counts.values()) < step.tokens["prompt"]
    assert sum(counts.values()) > schema_tokens // 2
    assert "its line in the prompt and its branch of the response_format schema" in step.tokens["note"]
    assert "the text the paradigm writes for it into the request" in step.tokens["note"]


def test_one_tool_counts_the_same_on_the_server_page_and_in_a_conversation() -> None:
    """In a conversation whose rendering is illustrative (a profile without a chat template, as a
    hosted model's); the demo's own template counts what it splices (docs/chat-templates.md §4)."""
    alice = UserFactory(username="alice")
    profile = demo_profile_ensure()
    profile.chat_template, profile.tokenizer = "", ""
    profile.save()
    comparison = _compare(alice, profile=profile)
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


def _system_prompt(step: Step) -> str:
    request = json.loads(step.exchanges.get(channel="llm").request_body)
    content = request["messages"][0]["content"]
    assert isinstance(content, str)
    return content


def _json_line(prompt: str, name: str) -> str:
    """The tool's line in the prompt's ``<tools>`` block, read back from the prompt itself."""
    block = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
    return next(line for line in block.splitlines() if json.loads(line)["name"] == name)


def test_a_prompt_paradigm_counts_each_tool_as_the_text_it_writes_into_the_prompt() -> None:
    alice = UserFactory(username="alice")
    comparison = _compare(alice, ("prompt_json", "prompt_xml", "intent"))
    steps = Step.objects.filter(turn__conversation__comparison=comparison, kind="decide")

    for paradigm in ("prompt_json", "prompt_xml"):
        step = steps.filter(turn__conversation__paradigm=paradigm).order_by("seq").first()
        assert step is not None
        prompt, encoding, counts = _system_prompt(step), step.tokens["encoding"], step.tokens["tools"]
        block = prompt.split("<tools>\n", 1)[1].split("\n</tools>", 1)[0]
        assert set(counts) == {json.loads(line)["name"] for line in block.splitlines()}, paradigm
        assert len(counts) >= 3, paradigm
        for name in counts:
            # The tool's section of the catalogue (up to the blank line) and its JSON line.
            section = prompt.split(f"### {name}\n", 1)[1].split("\n\n", 1)[0]
            text = f"### {name}\n{section}\n{_json_line(prompt, name)}"
            assert counts[name] == count_tokens(text, encoding), (paradigm, name)
        assert sum(counts.values()) < step.tokens["prompt"]
        assert "the text the paradigm writes for it" in step.tokens["note"]

    classify, fill = steps.filter(turn__conversation__paradigm="intent").order_by("seq")[:2]
    assert classify.title == "intent: classify"
    prompt = _system_prompt(classify)
    listed = [line for line in prompt.splitlines() if line.startswith("- ")]
    assert set(classify.tokens["tools"]) == {line[2:].split(":", 1)[0] for line in listed}
    for line in listed:
        name = line[2:].split(":", 1)[0]
        assert classify.tokens["tools"][name] == count_tokens(line, classify.tokens["encoding"])

    (name,) = fill.tokens["tools"]  # the fill call writes the one chosen tool
    prompt = _system_prompt(fill)
    described = prompt.split("\n\n")[1]  # "<name>: <description>\nParameters:\n- ..."
    assert described.startswith(f"{name}: ")
    text = f"{described}\n{_json_line(prompt, name)}"
    assert fill.tokens["tools"][name] == count_tokens(text, fill.tokens["encoding"])


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
    comparison = _compare(alice, PARADIGMS)
    runs = comparison_runs(comparison=comparison)

    total = comparison_cost([(run.turn, run.conversation.model_profile) for run in runs])
    assert total is not None
    definitions = {
        run.paradigm: tool_definitions_cost(run.turn, run.conversation.model_profile) for run in runs
    }
    # native sends its tools' definitions, structured a branch of its schema and a prompt line per
    # tool, the prompt paradigms write them into their prompts: each has a cost of its own.
    for paradigm in PARADIGMS:
        cost = definitions[paradigm]
        assert cost is not None and cost > 0, paradigm
    assert total > sum(cost for cost in definitions.values() if cost is not None)

    client = Client()
    client.force_login(alice)
    text = client.get(reverse("inspector-comparison", args=[comparison.public_id])).content.decode()
    assert f"${total:.6f}" in text
    cells = re.findall(r'<td class="num tool-definitions-cost">(.*?)</td>', text)
    assert len(cells) == len(PARADIGMS)
    assert all(cell.startswith("$") for cell in cells), cells


@pytest.mark.parametrize("paradigm", ["native", "structured", "prompt_xml"])
def test_the_conversation_page_shows_the_tool_definitions_cost_of_each_call_and_of_the_turn(
    paradigm: str,
) -> None:
    alice = UserFactory(username="alice")
    profile = demo_profile_ensure()
    profile_price_set(
        profile=profile,
        input_per_million=Decimal("3"),
        output_per_million=Decimal("15"),
        source="a test",
        actor=alice,
    )
    conversation, turn = conversation_start(
        owner=alice,
        model_profile=profile,
        question=WEATHER,
        servers=[demo_server_ensure()],
        paradigm=paradigm,
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    client = Client()
    client.force_login(alice)

    text = client.get(reverse("inspector-conversation", args=[conversation.public_id])).content.decode()

    model_calls = list(Step.objects.filter(turn=turn).exclude(tokens={}).order_by("seq"))
    assert len(model_calls) >= 2
    # Per call: the call's own definitions (sent again with each call) at the input price.
    per_call = re.findall(
        r'tool definitions: ([\d,]+) tokens in \d+ tools? · <span class="tool-definitions-cost">\$([\d.]+)</span>'
        r" at the input price",
        text,
    )
    expected = [
        (sum(step.tokens["tools"].values()), Decimal(3) * sum(step.tokens["tools"].values()) / 1_000_000)
        for step in model_calls
    ]
    assert [(int(tokens.replace(",", "")), Decimal(cost)) for tokens, cost in per_call] == [
        (tokens, cost.quantize(Decimal("0.000001"))) for tokens, cost in expected
    ]
    # Per turn: every call's definitions, beside the turn's cost.
    whole = tool_definitions_cost(turn, profile)
    assert whole is not None and whole == sum(cost for _, cost in expected)
    assert '<span class="tool-definitions-cost" title="the tool definitions' in text
    assert f"(tool definitions ${whole:.6f})" in text
