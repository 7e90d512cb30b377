"""Driving a run through real turns (the demo model, the demo MCP server over stdio, the
embedded runner): each matcher and each failure class, reproduced with the demo's scenarios;
never more turns in flight than the run's concurrency; cancelling stops new cases; a variant's
parameter wording reaches what the model is sent; repeats; each cell's cost at the profile's
price; a text paradigm's unreadable reply graded a parse failure."""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Iterator
from decimal import Decimal

import httpx2
import pytest
from django.contrib.auth.models import User
from pytest_django.fixtures import Settings

from conversations.loop.providers.http import endpoint_transport
from conversations.models import Exchange, Step, Turn
from conversations.pricing import profile_price_set, turn_cost
from conversations.runner import endpoint_for
from conversations.services import demo_profile_ensure
from inspector.evals.driver import run_advance, run_execute
from inspector.evals.models import EvalCaseResult, EvalRun
from inspector.evals.selectors import Progress, run_results
from inspector.evals.services import run_cancel, run_start, suite_save
from servers import gateway
from tests.factories import ModelProfileFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

WEATHER = "What will the weather be like in Beijing tomorrow?"
# Each case: its question and expectation, and the failure class it must get ("" passes).
CASES: list[tuple[str, str, str]] = [
    ("What is 12 * (3 + 4)? [demo:malformed-json]", "[{tool: demo/calculate}]", "parse_failure"),
    (f"{WEATHER} [demo:missing-argument]", "[{tool: demo/get_weather_forecast}]", "validation_failure"),
    (f"{WEATHER} [demo:unknown-tool]", "[{tool: demo/get_weather_forecast}]", "wrong_tool"),
    (f"{WEATHER} [demo:no-tool]", "[{tool: demo/get_weather_forecast}]", "no_call"),
    (WEATHER, "[{tool: demo/get_weather_forecast, arguments: {city: {regex: '^Par'}}}]", "wrong_arguments"),
    (WEATHER, "[]", "extra_call"),
    (WEATHER, "[{tool: demo/calculate}]", "wrong_tool"),
    ("What is 12 * (3 + 4)? [demo:http-500]", "[{tool: demo/calculate}]", "error"),
    (WEATHER, "[{tool: demo/get_weather_forecast}]\n    answer_contains: snow in July", "wrong_answer"),
    (WEATHER, "[{tool: demo/get_weather_forecast, arguments: {city: {regex: '^Bei'}, day: tomorrow}}]", ""),
    (
        "Convert 10 km to miles",
        "[{tool: demo/convert_units, arguments: {value: {range: [9.5, 10.5]}, "
        "from_unit: {oneOf: [km, kilometers]}, to_unit: {exact: miles}}}]",
        "",
    ),
    ("Hello there", "[]", ""),
]


def _suite_text(concurrency_hint: str = "") -> str:
    cases = "".join(f"  - question: {question!r}\n    expect: {expect}\n" for question, expect, _ in CASES)
    return f"name: classes{concurrency_hint}\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\ncases:\n{cases}"


@pytest.fixture(autouse=True)
def _embedded(settings: Settings) -> None:
    """The embedded default, also in the Postgres pass (where REDIS_URL would pick Celery)."""
    settings.TURN_RUNNER = "embedded"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username="alice")
    return user


def test_each_matcher_and_each_failure_class_through_real_turns_never_exceeding_the_concurrency(
    alice: User,
) -> None:
    suite = suite_save(owner=alice, text=_suite_text())
    run = run_start(suite=suite, user=alice, concurrency=3, dispatch=False)
    seen: list[Progress] = []

    run = run_execute(run=run, on_progress=seen.append, poll_seconds=0.05)

    assert run.status == EvalRun.Status.DONE
    results = {result.case_index: result for result in EvalCaseResult.objects.filter(cell__run=run)}
    assert [results[index].failure for index in range(len(CASES))] == [failure for _, _, failure in CASES]
    assert all(results[index].reason for index, (_, _, failure) in enumerate(CASES) if failure)
    assert "'city' is a required property" in results[1].reason
    assert "argument city is 'Beijing', which does not match /^Par/" in results[4].reason
    assert results[7].reason.startswith("the turn failed: the model endpoint answered 500")
    assert max(progress["running"] for progress in seen) == 3
    assert seen[-1]["finished"] == seen[-1]["total"] == len(CASES)
    cell = run_results(run)["cells"][0]  # type: ignore[index]
    assert (cell["passed"], cell["cases"]) == (3, len(CASES))  # type: ignore[index]
    assert cell["wrong_tool"] == 2 and cell["error"] == 1  # type: ignore[index]


def _wait(condition: Callable[[], bool], seconds: float = 30) -> None:
    deadline = time.monotonic() + seconds
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.05)


def test_cancelling_a_run_cancels_its_turns_in_flight_and_starts_no_more(alice: User) -> None:
    text = "name: slow\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\ncases:\n" + "".join(
        f"  - {{question: 'What is {n} + 1? [demo:slow=20]', expect: [{{tool: demo/calculate}}]}}\n"
        for n in range(3)
    )
    run = run_start(suite=suite_save(owner=alice, text=text), user=alice, concurrency=2, dispatch=False)
    run_advance(run=run)
    turns = Turn.objects.filter(conversation__owner=alice)
    _wait(lambda: turns.filter(status=Turn.Status.RUNNING).count() == 2)

    run = run_cancel(run=run, actor=alice)

    assert run.status == EvalRun.Status.CANCELLED
    assert run.error.startswith("cancelled by alice: 0 of 3 case runs had ended; 2 in flight were cancelled")
    _wait(lambda: all(turn.is_finished for turn in turns.all()))
    assert [turn.status for turn in turns] == [Turn.Status.CANCELLED] * 2
    assert all(turn.cancel_requested_by == "alice" for turn in turns)
    assert run_advance(run=run) is True
    statuses = sorted(EvalCaseResult.objects.filter(cell__run=run).values_list("status", flat=True))
    assert statuses == ["cancelled", "cancelled", "pending"]
    assert turns.count() == 2
    assert run_cancel(run=run, actor=alice).error == run.error  # twice changes nothing


def test_a_parameters_override_reaches_the_tools_offered_and_the_spliced_prompt(alice: User) -> None:
    wording = "The town whose sky you want, as people write it."
    text = (
        "name: worded\nmodels: [demo]\nparadigms: [native, prompt_json]\nservers: [demo]\n"
        f"variants:\n  worded: {{demo/get_weather_forecast: {{parameters: {{city: {wording!r}}}}}}}\n"
        f"cases:\n  - {{question: {WEATHER!r}, expect: [{{tool: demo/get_weather_forecast}}]}}\n"
    )
    run = run_start(suite=suite_save(owner=alice, text=text), user=alice, dispatch=False)

    run = run_execute(run=run, poll_seconds=0.05)

    assert run.status == EvalRun.Status.DONE and run.passed == 2
    for result in EvalCaseResult.objects.filter(cell__run=run).select_related("conversation", "cell"):
        assert result.conversation is not None
        turn = result.conversation.turns.get()
        [weather] = [tool for tool in turn.tools if tool["name"] == "get_weather_forecast"]
        properties = weather["inputSchema"]["properties"]
        assert properties["city"]["description"] == wording, result.cell.paradigm
        assert properties["day"]["description"].startswith("'today', 'tomorrow'")  # not reworded
        connect = Step.objects.get(turn=turn, kind=Step.Kind.CONNECT)
        assert "demo/get_weather_forecast: overridden for this conversation (parameter city)" in connect.text
        decide = Step.objects.filter(turn=turn, kind=Step.Kind.DECIDE).order_by("seq").first()
        assert decide is not None and wording in decide.prompt, result.cell.paradigm
        sent = Exchange.objects.get(step=decide, channel="llm").request_body
        assert json.dumps(wording)[1:-1] in sent, result.cell.paradigm


def test_repeats_run_every_case_that_many_times_per_cell_each_graded(alice: User) -> None:
    text = (
        "name: twice\nmodels: [demo]\nparadigms: [native, prompt_xml]\nservers: [demo]\nrepeats: 2\n"
        "cases:\n  - {question: 'What is 12 * (3 + 4)?', expect: [{tool: demo/calculate}]}\n"
        "  - {question: 'Hello there', expect: [{tool: demo/calculate}]}\n"
    )
    run = run_start(suite=suite_save(owner=alice, text=text), user=alice, concurrency=3, dispatch=False)

    run = run_execute(run=run, poll_seconds=0.05)

    assert (run.status, run.total, run.finished, run.passed) == (EvalRun.Status.DONE, 8, 8, 4)
    cells = run_results(run)["cells"]
    assert isinstance(cells, list) and len(cells) == 2
    for cell in cells:
        assert isinstance(cell, dict)
        assert (cell["cases"], cell["finished"], cell["passed"], cell["no_call"]) == (4, 4, 2, 2)
        assert cell["accuracy"] == 0.5 and len(set(cell["conversations"])) == 4  # type: ignore[arg-type]
    graded = EvalCaseResult.objects.filter(cell__run=run)
    assert sorted(set(graded.values_list("case_index", "repeat"))) == [(0, 0), (0, 1), (1, 0), (1, 1)]
    assert all(result.status != EvalCaseResult.Status.PENDING and result.finished_at for result in graded)
    assert {result.failure for result in graded.filter(case_index=1)} == {"no_call"}


def test_each_cell_costs_its_turns_at_the_profiles_price(alice: User) -> None:
    profile = demo_profile_ensure()
    profile_price_set(
        profile=profile,
        input_per_million=Decimal("2.50"),
        output_per_million=Decimal("10"),
        source="a price for this test",
        actor=alice,
    )
    text = (
        "name: priced\nmodels: [demo]\nparadigms: [native, prompt_json]\nservers: [demo]\n"
        "cases:\n  - {question: 'What is 12 * (3 + 4)?', expect: [{tool: demo/calculate}]}\n"
        "  - {question: 'Hello there', expect: []}\n"
    )
    run = run_start(suite=suite_save(owner=alice, text=text), user=alice, dispatch=False)

    run = run_execute(run=run, poll_seconds=0.05)

    assert run.status == EvalRun.Status.DONE
    cells = {cell["paradigm"]: cell for cell in run_results(run)["cells"]}  # type: ignore[union-attr, index]
    for paradigm, cell in cells.items():
        turns = Turn.objects.filter(conversation__public_id__in=cell["conversations"])
        expected = sum((turn_cost(turn, profile).total for turn in turns), Decimal(0))  # type: ignore[union-attr]
        tokens_in, tokens_out = cell["input_tokens"], cell["output_tokens"]
        assert expected == (Decimal("2.50") * tokens_in + Decimal(10) * tokens_out) / 1_000_000, paradigm
        assert cell["cost"] is not None and Decimal(cell["cost"]) == expected > 0, paradigm
    # Unpriced, the same cells cost nothing known.
    profile_price_set(
        profile=profile, input_per_million=None, output_per_million=None, source="", actor=alice
    )
    rerun = run_execute(run=run_start(suite=run.suite, user=alice, dispatch=False), poll_seconds=0.05)
    assert all(cell["cost"] is None for cell in run_results(rerun)["cells"])  # type: ignore[union-attr, index]


# What a model whose reply was cut off or garbled sends, as each text paradigm asked for a call.
# The demo's own scenarios never get this far in a text paradigm: the tolerant readers repair
# what [demo:malformed-json] breaks there (docs/evals.md §3), so a scripted endpoint sends it.
GARBLED = {
    "prompt_json": '{"tool": "demo__calculate", "arguments": "twelve times seven"}',
    "prompt_xml": '<function_calls>\n<invoke name="demo__calc',
}


def _garbling_model(request: httpx2.Request) -> httpx2.Response:
    """An OpenAI Chat Completions endpoint: the first reply to a question is ``GARBLED`` in the
    convention its system prompt teaches; anything after that is answered in plain text."""
    messages = json.loads(request.content)["messages"]
    first = [message["role"] for message in messages] == ["system", "user"]
    convention = "prompt_xml" if "<function_calls>" in messages[0]["content"] else "prompt_json"
    text = GARBLED[convention] if first else "I could not use the tool."
    return httpx2.Response(
        200,
        json={
            "id": "chatcmpl-garbled",
            "object": "chat.completion",
            "created": 0,
            "model": "garbler",
            "choices": [
                {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
            ],
            "usage": {"prompt_tokens": 10, "completion_tokens": 5, "total_tokens": 15},
        },
    )


def test_a_text_paradigm_reply_no_reader_can_use_is_a_parse_failure_through_real_turns(alice: User) -> None:
    profile = ModelProfileFactory(
        name="garbler", base_url="http://garbler.test/v1", model="garbler", api_key_env=""
    )
    endpoint_transport.set(endpoint_for(profile), httpx2.MockTransport(_garbling_model))
    text = (
        "name: garbled\nmodels: [garbler]\nparadigms: [prompt_json, prompt_xml]\nservers: [demo]\n"
        "cases:\n  - {question: 'What is 12 * 7?', expect: [{tool: demo/calculate}]}\n"
    )
    run = run_start(suite=suite_save(owner=alice, text=text), user=alice, dispatch=False)

    run = run_execute(run=run, poll_seconds=0.05)

    assert run.status == EvalRun.Status.DONE
    cells = {cell["paradigm"]: cell for cell in run_results(run)["cells"]}  # type: ignore[union-attr, index]
    assert {paradigm: cell["parse_failure"] for paradigm, cell in cells.items()} == {
        "prompt_json": 1,
        "prompt_xml": 1,
    }
    [json_failure] = cells["prompt_json"]["failures"]
    assert json_failure["reason"].startswith("the arguments of demo/calculate could not be read")
    [xml_failure] = cells["prompt_xml"]["failures"]
    assert xml_failure["reason"] == (
        "the reply could not be read: reply is truncated: it ends inside a call tag; kept what was complete"
    )
