"""``eval run --baseline RUN_ID|latest --fail-on-regression`` and ``eval compare A B``: two runs
compared case by case (``inspector.evals.comparing``), a CI gate on a case that passed less often
than in the baseline, and the refusals (no baseline, another user's run)."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from pytest_django.fixtures import Settings

from inspector.evals.management.commands.eval import EXIT_REGRESSION
from inspector.evals.models import EvalRun
from servers import gateway
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

SUITE = (
    "name: gate\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\n"
    "cases:\n"
    "  - {question: 'What is 2 + 2?', expect: [{tool: demo/calculate}]}\n"
    "  - {question: 'What will the weather be like in Paris today?', expect: [{tool: TOOL}]}\n"
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


def _eval(*args: str) -> tuple[str, str, int]:
    out, err = StringIO(), StringIO()
    code = 0
    try:
        call_command("eval", *args, stdout=out, stderr=err)
    except CommandError as exc:
        code = exc.returncode
        err.write(str(exc))
    return out.getvalue(), err.getvalue(), code


def _suite(tmp_path: Path, tool: str) -> str:
    path = tmp_path / "gate.yaml"
    path.write_text(SUITE.replace("TOOL", tool))
    return str(path)


def test_a_case_that_passes_less_often_than_in_the_baseline_fails_the_gate(
    admin: User, tmp_path: Path
) -> None:
    out, _, code = _eval("run", _suite(tmp_path, "demo/get_weather_forecast"), "--json")
    assert code == 0
    first = json.loads(out)["run"]

    # Unchanged: compared with the latest run, nothing regressed.
    out, _, code = _eval(
        "run",
        _suite(tmp_path, "demo/get_weather_forecast"),
        "--json",
        "--baseline",
        "latest",
        "--fail-on-regression",
    )
    assert code == 0
    same: dict[str, Any] = json.loads(out)["baseline"]
    assert same["baseline"] == first and same["regression"] is False
    assert [case["change"] for case in same["cells"][0]["cases"]] == ["same", "same"]

    # The second case now expects another tool: it regressed; the gate exits 4 and names it.
    out, err, code = _eval(
        "run", _suite(tmp_path, "demo/calculate"), "--baseline", first, "--fail-on-regression"
    )
    assert code == EXIT_REGRESSION
    assert "1 case(s) passed less often than in the baseline run" in err
    assert "regressed 1/1 → 0/1  What will the weather be like in Paris today?" in out

    third = EvalRun.objects.order_by("-created_at", "-pk").first()
    assert third is not None
    out, _, code = _eval("compare", first, str(third.public_id), "--json")
    compared = json.loads(out)
    assert code == 0 and compared["regressed"] == 1 and compared["fixed"] == 0
    cell = compared["cells"][0]
    assert (cell["baseline"], cell["run"], cell["change"]) == ("2/2", "1/2", "regressed")
    assert (cell["baseline_pass_rate"], cell["pass_rate"]) == (1.0, 0.5)

    # The other way round, the same case was fixed.
    out, _, _ = _eval("compare", str(third.public_id), first, "--json")
    assert json.loads(out)["fixed"] == 1


def test_the_gate_needs_a_baseline_and_never_reads_another_users_run(admin: User, tmp_path: Path) -> None:
    _, err, code = _eval("run", _suite(tmp_path, "demo/calculate"), "--fail-on-regression")
    assert code == 1 and "--fail-on-regression needs --baseline" in err

    bob = UserFactory(username="bob")
    out, _, code = _eval("run", _suite(tmp_path, "demo/calculate"), "--json", "--user", "bob")
    bobs = json.loads(out)["run"]
    _, err, code = _eval("run", _suite(tmp_path, "demo/calculate"), "--baseline", bobs)
    assert code == 1 and f"no run {bobs!r} of yours" in err
    _, err, code = _eval("compare", bobs, bobs)
    assert code == 1 and "of yours" in err
    assert bob.pk
