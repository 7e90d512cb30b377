"""The browser's ``eval compare`` (issue 50): two real runs (the demo model and the demo MCP
server over stdio) with a regression planted between them, compared on the page case by case
with the same verdicts as ``eval compare --json``; the run page offers the comparison with its
baseline picked; another user's run, as either side, is a 404."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from html import unescape
from io import StringIO

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client
from pytest_django.fixtures import Settings

from inspector.evals.driver import run_execute
from inspector.evals.models import EvalRun
from inspector.evals.services import run_start, suite_save
from servers import gateway
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

SUITE = (
    "name: gate\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\n"
    "cases:\n"
    "  - {question: 'What is 2 + 2?', expect: [{tool: demo/calculate}]}\n"
    "  - {question: 'What will the weather be like in Paris today?', expect: [{tool: TOOL}]}\n"
)
NEW_CASE = "  - {question: 'Convert 10 km to miles', expect: [{tool: demo/convert_units}]}\n"
ROW = re.compile(
    r'<tr class="compare-case[^"]*" data-change="(\w+)">.*?<td class="compare-question">(.*?)</td>', re.S
)


@pytest.fixture(autouse=True)
def _embedded(settings: Settings) -> Iterator[None]:
    settings.TURN_RUNNER = "embedded"
    yield
    gateway.close_all()


@pytest.fixture
def admin() -> User:
    user: User = UserFactory(username="admin", is_superuser=True, is_staff=True)
    return user


def _run(owner: User, text: str, suite_id: int | None = None) -> EvalRun:
    suite = suite_save(owner=owner, text=text, suite=owner.eval_suites.filter(pk=suite_id).first())  # type: ignore[attr-defined]
    return run_execute(run=run_start(suite=suite, user=owner, dispatch=False), poll_seconds=0.05)


@pytest.fixture
def runs(admin: User) -> tuple[EvalRun, EvalRun]:
    """A baseline where both cases pass, then a run where the weather case expects the wrong
    tool (regressed) and a third case was added (new)."""
    first = _run(admin, SUITE.replace("TOOL", "demo/get_weather_forecast"))
    second = _run(admin, SUITE.replace("TOOL", "demo/calculate") + NEW_CASE, first.suite_id)
    assert first.status == second.status == EvalRun.Status.DONE
    return first, second


def _client(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_the_page_shows_the_planted_regression_as_eval_compare_json_does(
    admin: User, runs: tuple[EvalRun, EvalRun]
) -> None:
    first, second = runs
    out = StringIO()
    call_command("eval", "compare", str(first.public_id), str(second.public_id), "--json", stdout=out)
    cli = json.loads(out.getvalue())

    response = _client(admin).get(
        f"/evals/runs/{second.public_id}/compare", {"baseline": str(first.public_id)}
    )

    assert response.status_code == 200
    html = response.content.decode()
    shown = [(change, unescape(question)) for change, question in ROW.findall(html)]
    expected = [(case["change"], case["question"]) for cell in cli["cells"] for case in cell["cases"]]
    assert (
        shown
        == expected
        == [
            ("same", "What is 2 + 2?"),
            ("regressed", "What will the weather be like in Paris today?"),
            ("new", "Convert 10 km to miles"),
        ]
    )
    assert f'data-regressed="{cli["regressed"]}" data-fixed="{cli["fixed"]}"' in html
    assert [cell["change"] for cell in cli["cells"]] == ["regressed"]
    assert 'data-change="regressed"' in html.split('class="compare-cell"')[1].split(">")[0]
    # 2/2 → 2/3 stays inside 2/2's 95% interval: listed as regressed, but not what fails the gate.
    assert cli["regression"] is False and cli["cells"][0]["below_baseline"] is False
    assert 'data-below-baseline="false"' in html.split('class="compare-cell"')[1].split(">")[0]
    assert "below the baseline&#x27;s 95% interval" in html or "below the baseline's 95% interval" in html
    # The other way round the case was fixed and the new one is gone.
    back = _client(admin).get(f"/evals/runs/{first.public_id}/compare", {"baseline": str(second.public_id)})
    assert [change for change, _ in ROW.findall(back.content.decode())] == ["same", "fixed", "gone"]


def test_the_run_page_offers_the_comparison_with_the_run_before_picked(
    admin: User, runs: tuple[EvalRun, EvalRun]
) -> None:
    first, second = runs

    html = _client(admin).get(f"/evals/runs/{second.public_id}/").content.decode()

    assert f'action="/evals/runs/{second.public_id}/compare"' in html
    assert f'<option value="{first.public_id}" selected>' in html
    picker = _client(admin).get(f"/evals/runs/{second.public_id}/compare").content.decode()
    assert "Choose the run to compare this one with." in picker and 'class="compare-case' not in picker


def test_another_users_run_on_either_side_is_a_404(admin: User, runs: tuple[EvalRun, EvalRun]) -> None:
    first, second = runs
    bob = UserFactory(username="bob")
    own = _run(bob, SUITE.replace("TOOL", "demo/get_weather_forecast").replace("gate", "bobs"))
    url = f"/evals/runs/{second.public_id}/compare"

    assert _client(bob).get(url, {"baseline": str(first.public_id)}).status_code == 404
    assert _client(bob).get(url).status_code == 404
    assert (
        _client(bob)
        .get(f"/evals/runs/{own.public_id}/compare", {"baseline": str(first.public_id)})
        .status_code
        == 404
    )
    assert _client(admin).get(url, {"baseline": str(own.public_id)}).status_code == 404
    assert _client(admin).get(url, {"baseline": "not-a-uuid"}).status_code == 404
