"""``manage.py ask --compare``: one question under several runs, end to end (the demo model served
in-process, the bundled demo MCP server over stdio), as a table or as JSON."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from typing import Any

import pytest
from django.core.management import CommandError, call_command

from conversations.models import Comparison, Conversation, ModelProfile
from conversations.record.transcripts.document import transcript_document
from conversations.services import demo_profile_ensure
from servers import gateway
from tests.factories import UserFactory

WEATHER = "What will the weather be like in Beijing tomorrow?"

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _admin() -> None:
    """The superuser ``make run`` creates, whom ``ask`` runs as by default."""
    UserFactory(username="admin", is_superuser=True, is_staff=True)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    """Pooled stdio sessions would otherwise outlive the test (and its database)."""
    yield
    gateway.close_all()


@pytest.fixture
def second_demo() -> ModelProfile:
    """Another profile of the demo model, so two runs can differ in model alone."""
    demo = demo_profile_ensure()
    return ModelProfile.objects.create(
        name="demo-2",
        provider=demo.provider,
        base_url=demo.base_url,
        model=demo.model,
        api_key_env=demo.api_key_env,
        is_demo=True,
        native_tools=demo.native_tools,
        structured_output=demo.structured_output,
        parallel_calls=demo.parallel_calls,
    )


def _first_llm_request(transcript: dict[str, Any]) -> str:
    [turn] = transcript["turns"]
    bodies = [e["request_body"] for step in turn["steps"] for e in step["exchanges"] if e["channel"] == "llm"]
    return str(bodies[0])


def _compare(*args: str) -> str:
    out = StringIO()
    call_command("ask", WEATHER, "--compare", *args, stdout=out)
    return out.getvalue()


@pytest.mark.parametrize(
    ("runs", "message"),
    [
        ("native,native", "lists the run demo:native twice"),
        ("native", "at least two runs"),
        ("native,telepathy", "no paradigm 'telepathy'"),
        ("native,nobody:native", "no model profile named 'nobody'"),
        ("native,:native", "write PARADIGM or MODEL:PARADIGM"),
    ],
)
def test_a_bad_run_list_is_refused_before_anything_runs(runs: str, message: str) -> None:
    with pytest.raises(CommandError, match=message):
        _compare(runs)

    assert not Comparison.objects.exists()
    assert not Conversation.objects.exists()


def test_compare_and_paradigm_exclude_each_other() -> None:
    with pytest.raises(CommandError, match="exclude each other"):
        call_command("ask", WEATHER, "--paradigm", "native", "--compare", "native,demo-2:native")


def test_native_and_prompt_xml_answer_the_same_question_each_in_their_own_way() -> None:
    document: dict[str, Any] = json.loads(_compare("native,prompt_xml", "--json"))

    native, xml = document["runs"]
    assert (native["conversation"]["paradigm"], xml["conversation"]["paradigm"]) == ("native", "prompt_xml")
    for summary in document["summary"]:
        assert (summary["status"], summary["answered"]) == ("done", True), summary["error"]
        assert summary["tool"] == "demo/get_weather_forecast"
        assert summary["arguments"]["city"] == "Beijing"
    native_request = json.loads(_first_llm_request(native))
    xml_request = json.loads(_first_llm_request(xml))
    # Native calling sends the tools as a field; prompt XML writes them into the system prompt.
    assert "tools" in native_request and "tools" not in xml_request
    assert "<function_calls>" in xml_request["messages"][0]["content"]
    [xml_turn] = xml["turns"]
    xml_decide = next(step for step in xml_turn["steps"] if step["kind"] == "decide")
    assert xml_decide["prompt_exact"] is True


def test_two_models_answer_the_same_question_and_the_table_compares_them(second_demo: ModelProfile) -> None:
    output = _compare("native,demo-2:native")

    comparison = Comparison.objects.get()
    runs = list(comparison.conversations.order_by("pk"))
    assert [(run.model_profile.name, run.paradigm) for run in runs] == [
        ("demo", "native"),
        ("demo-2", "native"),
    ]
    assert all(run.turns.get().status == "done" for run in runs)
    header, rule, *rows = output.split("Q: " + WEATHER)[1].strip().splitlines()[:4]
    assert header.split()[:4] == ["paradigm", "model", "status", "steps"]
    assert set(rule) <= {"-", " "}
    for row, profile in zip(rows, ["demo", "demo-2"], strict=True):
        assert row.split()[:3] == ["native", profile, "done"]
        # The arguments column is cut to its width; the city is in it either way.
        assert "demo/get_weather_forecast" in row and '"city": "Beij' in row
        assert row.rstrip().endswith("yes")
    assert f"Comparison {comparison.public_id}  /compare/{comparison.public_id}/" in output


def test_the_json_holds_each_runs_transcript_and_the_summary(second_demo: ModelProfile) -> None:
    document: dict[str, Any] = json.loads(_compare("demo:native,demo-2:native", "--json"))

    comparison = Comparison.objects.get(public_id=document["comparison"])
    conversations = list(comparison.conversations.order_by("pk"))
    assert document["runs"] == [
        json.loads(json.dumps(transcript_document(conversation=c))) for c in conversations
    ]
    for summary, conversation in zip(document["summary"], conversations, strict=True):
        assert summary["conversation"] == str(conversation.public_id)
        assert (summary["status"], summary["answered"]) == ("done", True)
        assert summary["model_calls"] == 2
        assert summary["tool"] == "demo/get_weather_forecast"
        assert summary["arguments"]["city"] == "Beijing"
        assert "Beijing" in summary["answer"]
        assert summary["wall_ms"] > 0 and summary["llm_ms"] > 0


def test_a_failed_run_makes_the_command_fail(second_demo: ModelProfile) -> None:
    second_demo.base_url = "http://127.0.0.1:9/v1"  # nothing listens on the discard port
    second_demo.save()

    with pytest.raises(CommandError, match=r"1 of 2 runs did not finish: demo-2:native failed"):
        _compare("native,demo-2:native")

    statuses = {c.model_profile.name: c.turns.get().status for c in Conversation.objects.all()}
    assert statuses == {"demo": "done", "demo-2": "failed"}
