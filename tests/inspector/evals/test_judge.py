"""A model-graded matcher (a case's ``judge``, issue 50): the suite syntax and its check before
anything is stored (an unknown profile named with the closest real one, the demo refused), the
judge's reply read strictly (anything but a verdict is ``error``, never ``pass``), and real runs:
the case turns on the demo model and the demo MCP server over stdio, the judge a scripted
endpoint (the model boundary) — a pass, a fail, a malformed and a huge reply, and a judge that
does not answer in time; each judge's conversation is recorded, linked from its case and
invisible to another user."""

from __future__ import annotations

import json
import threading
import uuid
from collections.abc import Iterator
from typing import Any
from xml.etree import ElementTree

import httpx2
import pytest
from django.contrib.auth.models import User
from django.test import Client
from pytest_django.fixtures import Settings

from conversations.loop.providers.http import endpoint_transport
from conversations.models import Conversation, Turn
from conversations.runner import endpoint_for
from inspector.evals.comparing import runs_compare
from inspector.evals.driver import run_execute
from inspector.evals.judging import MAX_REPLY_CHARS, VerdictError, verdict_read
from inspector.evals.models import EvalCaseResult, EvalRun
from inspector.evals.reports import junit_xml
from inspector.evals.selectors import run_results
from inspector.evals.services import run_start, suite_save, suite_save_checked
from inspector.evals.suites import SuiteError, parse_suite
from servers import gateway
from tests.factories import ModelProfileFactory, UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

RUBRIC = "The answer states the sum as a number."
# What the scripted judge replies when the case's question is in what it is asked.
REPLIES = {
    "What is 2 + 2?": '{"score": 9, "reason": "States 4."}',
    "What is 3 + 3?": '{"score": 2, "reason": "No number given."}',
    "What is 4 + 4?": "Sure! I would give it a 10 out of 10.",
    "What is 5 + 5?": json.dumps({"score": 10, "reason": "x" * (MAX_REPLY_CHARS * 3)}),
}
SLOW = "What is 6 + 6?"


def _suite(questions: list[str], *, judge: str = "judge", name: str = "judged") -> str:
    cases = "".join(
        f"  - question: {question!r}\n    expect: [{{tool: demo/calculate}}]\n"
        f"    judge: {{profile: {judge}, rubric: {RUBRIC!r}}}\n"
        for question in questions
    )
    return f"name: {name}\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\ncases:\n{cases}"


@pytest.fixture(autouse=True)
def _embedded(settings: Settings) -> Iterator[None]:
    settings.TURN_RUNNER = "embedded"
    yield
    gateway.close_all()


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username="alice")
    return user


class ScriptedJudge:
    """An OpenAI Chat Completions endpoint that answers as ``REPLIES`` says; for ``SLOW`` it
    holds the request until ``release`` is set (the test's end)."""

    def __init__(self) -> None:
        self.release = threading.Event()
        self.asked: list[str] = []

    def __call__(self, request: httpx2.Request) -> httpx2.Response:
        messages = json.loads(request.content)["messages"]
        asked = str(messages[-1]["content"])
        self.asked.append(asked)
        if SLOW in asked:
            self.release.wait(60)
            text = '{"score": 10, "reason": "late"}'
        else:
            text = next(reply for question, reply in REPLIES.items() if question in asked)
        return httpx2.Response(
            200,
            json={
                "id": "chatcmpl-judge",
                "object": "chat.completion",
                "created": 0,
                "model": "judge",
                "choices": [
                    {"index": 0, "message": {"role": "assistant", "content": text}, "finish_reason": "stop"}
                ],
                "usage": {"prompt_tokens": 50, "completion_tokens": 12, "total_tokens": 62},
            },
        )


@pytest.fixture
def judge() -> Iterator[ScriptedJudge]:
    # An endpoint of its own per test: a transport set for an endpoint stays set for it.
    base_url = f"http://judge-{uuid.uuid4().hex[:12]}.test/v1"
    profile = ModelProfileFactory(name="judge", base_url=base_url, model="judge", api_key_env="")
    scripted = ScriptedJudge()
    endpoint_transport.set(endpoint_for(profile), httpx2.MockTransport(scripted))
    yield scripted
    scripted.release.set()


# --- The suite syntax and its check ---------------------------------------------------------------


def test_a_judge_is_read_with_its_default_pass_when_and_written_back() -> None:
    suite = parse_suite(_suite(["What is 2 + 2?"]))

    judge = suite.cases[0].judge
    assert judge is not None and (judge.profile, judge.rubric) == ("judge", RUBRIC)
    assert judge.pass_when == {"range": [7, 10]}
    assert parse_suite(json.dumps(suite.as_json())).cases[0].judge == judge


@pytest.mark.parametrize(
    ("judge", "field", "words"),
    [
        ("judge", "cases[0].judge", "an object with profile and rubric"),
        ({"profile": "judge"}, "cases[0].judge.rubric", "is required"),
        ({"rubric": "r"}, "cases[0].judge.profile", "is required"),
        ({"profile": "judge", "rubric": "r", "mood": "kind"}, "cases[0].judge.mood", "unknown field"),
        ({"profile": "judge", "rubric": "r", "pass_when": 11}, "cases[0].judge.pass_when", "0 to 10"),
        ({"profile": "judge", "rubric": "r", "pass_when": True}, "cases[0].judge.pass_when", "0 to 10"),
        (
            {"profile": "judge", "rubric": "r", "pass_when": {"regex": "9"}},
            "cases[0].judge.pass_when",
            "range",
        ),
        (
            {"profile": "judge", "rubric": "r", "pass_when": {"range": [9, 3]}},
            "cases[0].judge.pass_when.range",
            "min ≤ max",
        ),
        ({"profile": "judge", "rubric": "r" * 4001}, "cases[0].judge.rubric", "at most 4000"),
    ],
)
def test_a_bad_judge_is_refused_naming_the_field(judge: object, field: str, words: str) -> None:
    document = {
        "name": "s",
        "models": ["demo"],
        "paradigms": ["native"],
        "cases": [{"question": "q", "expect": [], "judge": judge}],
    }
    with pytest.raises(SuiteError) as caught:
        parse_suite(json.dumps(document))
    assert caught.value.field == field and words in caught.value.problem


def test_an_unknown_judge_profile_is_refused_naming_the_closest_and_nothing_is_stored(
    alice: User, judge: ScriptedJudge
) -> None:
    with pytest.raises(SuiteError) as caught:
        suite_save_checked(owner=alice, text=_suite(["What is 2 + 2?"], judge="jduge"))

    assert caught.value.field == "cases[0].judge.profile"
    assert caught.value.problem == "no model profile named 'jduge'; did you mean 'judge'?"
    assert not alice.eval_suites.exists()  # type: ignore[attr-defined]


def test_the_demo_model_cannot_judge(alice: User) -> None:
    with pytest.raises(SuiteError) as caught:
        suite_save_checked(owner=alice, text=_suite(["What is 2 + 2?"], judge="demo"))

    assert caught.value.field == "cases[0].judge.profile"
    assert caught.value.problem == "the demo model cannot judge; choose a real profile"


# --- The verdict, read strictly --------------------------------------------------------------------


@pytest.mark.parametrize(
    ("reply", "words"),
    [
        ("", "empty"),
        ("   \n", "empty"),
        ("x" * (MAX_REPLY_CHARS + 1), "characters long"),
        ("Score: 9", "not one JSON object"),
        ('```json\n{"score": 9, "reason": "ok"}\n```', "not one JSON object"),
        ('{"score": 9, "reason": "ok"} and also', "not one JSON object"),
        ('[{"score": 9, "reason": "ok"}]', "not one JSON object"),
        ('{"score": 9}', "not exactly score and reason"),
        ('{"score": 9, "reason": "ok", "pass": true}', "not exactly score and reason"),
        ('{"score": 9, "score": 1, "reason": "ok"}', "twice"),
        ('{"score": 9.5, "reason": "ok"}', "no whole number"),
        ('{"score": "9", "reason": "ok"}', "no whole number"),
        ('{"score": true, "reason": "ok"}', "no whole number"),
        ('{"score": 11, "reason": "ok"}', "no whole number"),
        ('{"score": -1, "reason": "ok"}', "no whole number"),
        ('{"score": NaN, "reason": "ok"}', "no JSON number"),
        ('{"score": 9, "reason": ["ok"]}', "not a text"),
        ("[" * 1990 + "]" * 1990, "nested too deep"),
    ],
)
def test_a_reply_that_is_no_verdict_is_refused_saying_why(reply: str, words: str) -> None:
    with pytest.raises(VerdictError) as caught:
        verdict_read(reply)
    assert words in str(caught.value)


def test_a_verdicts_reason_is_bounded_and_storable() -> None:
    score, reason = verdict_read(json.dumps({"score": 7, "reason": "\u202eok\x00" + "y" * 3000}))

    assert score == 7 and "\x00" not in reason and len(reason) == 501 and reason.startswith("\u202eok\ufffd")


# --- Real runs ------------------------------------------------------------------------------------


def test_judged_cases_pass_fail_or_error_through_real_turns_and_each_judge_is_recorded(
    alice: User, judge: ScriptedJudge
) -> None:
    run = run_start(suite=suite_save(owner=alice, text=_suite(list(REPLIES))), user=alice, dispatch=False)

    run = run_execute(run=run, poll_seconds=0.05)

    assert run.status == EvalRun.Status.DONE
    results = {result.question: result for result in EvalCaseResult.objects.filter(cell__run=run)}
    outcome = {question: (result.status, result.failure) for question, result in results.items()}
    assert outcome == {
        "What is 2 + 2?": ("passed", ""),
        "What is 3 + 3?": ("failed", "wrong_answer"),
        "What is 4 + 4?": ("failed", "error"),
        "What is 5 + 5?": ("failed", "error"),
    }
    assert results["What is 3 + 3?"].reason == (
        'the judge (judge) scored 2, which does not pass ({"range": [7, 10]}): No number given.'
    )
    assert results["What is 4 + 4?"].reason.startswith(
        "the judge (judge) gave no verdict: its reply is not one JSON"
    )
    assert results["What is 5 + 5?"].reason.startswith("the judge (judge) gave no verdict: its reply is")
    assert "characters long" in results["What is 5 + 5?"].reason
    # Each judge was asked in a conversation of its own, recorded and owned by the runner; what
    # it was asked holds the rubric, the calls and the answer it graded.
    for question, result in results.items():
        conversation = result.judge_conversation
        assert conversation is not None and conversation.owner_id == alice.pk
        assert conversation.model_profile.name == "judge" and conversation != result.conversation
        turn = conversation.turns.get()
        assert turn.status == Turn.Status.DONE and RUBRIC in turn.question and question in turn.question
        assert "demo/calculate" in turn.question
    # Statistics and the comparison count judged cases like any other.
    cell: Any = run_results(run)["cells"][0]  # type: ignore[index]
    assert (cell["passed"], cell["wrong_answer"], cell["error"]) == (1, 1, 2)
    [failure] = [item for item in cell["failures"] if item["question"] == "What is 3 + 3?"]
    assert failure["judge_conversation"] == str(results["What is 3 + 3?"].judge_conversation.public_id)  # type: ignore[union-attr]
    junit = ElementTree.fromstring(junit_xml(run_results(run)))
    failures = {case.get("name"): case.find("failure") for case in junit.iter("testcase")}
    judged_types = {
        name: None if failure is None else failure.get("type") for name, failure in failures.items()
    }
    assert judged_types == {
        "native/demo/default: What is 2 + 2?": None,
        "native/demo/default: What is 3 + 3?": "wrong_answer",
        "native/demo/default: What is 4 + 4?": "error",
        "native/demo/default: What is 5 + 5?": "error",
    }
    cases = {case["question"]: case["change"] for case in runs_compare(run, run)["cells"][0]["cases"]}  # type: ignore[index]
    assert cases == dict.fromkeys(REPLIES, "same")


def test_a_judge_that_fails_its_own_checks_is_not_asked(alice: User, judge: ScriptedJudge) -> None:
    text = _suite(["What is 2 + 2?"]).replace("demo/calculate", "demo/get_weather_forecast")
    run = run_execute(
        run=run_start(suite=suite_save(owner=alice, text=text), user=alice, dispatch=False), poll_seconds=0.05
    )

    result = EvalCaseResult.objects.get(cell__run=run)
    assert result.failure == "wrong_tool" and result.judge_conversation is None and judge.asked == []


def test_a_judge_that_does_not_answer_in_time_makes_the_case_an_error(
    alice: User, judge: ScriptedJudge, settings: Settings
) -> None:
    settings.EVAL_JUDGE_SECONDS = 0.5
    run = run_start(suite=suite_save(owner=alice, text=_suite([SLOW])), user=alice, dispatch=False)

    run = run_execute(run=run, poll_seconds=0.05)
    judge.release.set()

    result = EvalCaseResult.objects.get(cell__run=run)
    assert (result.status, result.failure) == ("failed", "error")
    assert result.reason == "the judge (judge) gave no verdict within 0.5 s; its turn was cancelled"
    judged = result.judge_conversation.turns.get()  # type: ignore[union-attr]
    assert judged.cancel_requested_at is not None


def test_another_user_gets_404_on_a_judges_conversation(alice: User, judge: ScriptedJudge) -> None:
    run = run_start(
        suite=suite_save(owner=alice, text=_suite(["What is 2 + 2?"])), user=alice, dispatch=False
    )
    run = run_execute(run=run, poll_seconds=0.05)
    judged = EvalCaseResult.objects.get(cell__run=run).judge_conversation
    assert isinstance(judged, Conversation)
    owner, other = Client(), Client()
    owner.force_login(alice)
    other.force_login(UserFactory(username="bob"))

    assert owner.get(f"/c/{judged.public_id}/").status_code == 200
    assert other.get(f"/c/{judged.public_id}/").status_code == 404
    assert other.get(f"/api/conversations/{judged.public_id}").status_code == 404
