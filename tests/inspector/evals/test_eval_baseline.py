"""``eval run --baseline RUN_ID|latest --fail-on-regression`` and ``eval compare A B``: two runs
compared case by case (``inspector.evals.comparing``), a CI gate on a cell whose pass rate is
below the baseline's 95% interval, and the refusals (no baseline, another user's run)."""

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


def test_a_cell_below_the_baseline_interval_fails_the_gate_listing_the_flipped_case(
    admin: User, tmp_path: Path
) -> None:
    out, _, code = _eval("run", _suite(tmp_path, "demo/get_weather_forecast"), "--repeats", "2", "--json")
    assert code == 0
    first = json.loads(out)["run"]

    # Unchanged: compared with the latest run, nothing regressed.
    out, _, code = _eval(
        "run",
        _suite(tmp_path, "demo/get_weather_forecast"),
        "--repeats",
        "2",
        "--json",
        "--baseline",
        "latest",
        "--fail-on-regression",
    )
    assert code == 0
    same: dict[str, Any] = json.loads(out)["baseline"]
    assert same["baseline"] == first and same["regression"] is False
    assert [case["change"] for case in same["cells"][0]["cases"]] == ["same", "same"]

    # The second case now expects another tool: 2/4 is below 4/4's interval [0.51, 1]; the gate
    # exits 4 and names the cell and the case that flipped.
    out, err, code = _eval(
        "run",
        _suite(tmp_path, "demo/calculate"),
        "--repeats",
        "2",
        "--baseline",
        first,
        "--fail-on-regression",
    )
    assert code == EXIT_REGRESSION
    assert "1 cell(s) passed below the baseline run" in err and "demo · native · default 4/4 → 2/4" in err
    assert "What will the weather be like in Paris today?" in err
    assert "regressed 2/2 → 0/2  What will the weather be like in Paris today?" in out
    assert "below the baseline's 95% interval [0.51, 1.00]" in out

    third = EvalRun.objects.order_by("-created_at", "-pk").first()
    assert third is not None
    out, _, code = _eval("compare", first, str(third.public_id), "--json")
    compared = json.loads(out)
    assert code == 0 and compared["regressed"] == 1 and compared["fixed"] == 0
    assert compared["regression"] is True
    cell = compared["cells"][0]
    assert (cell["baseline"], cell["run"], cell["change"]) == ("4/4", "2/4", "regressed")
    assert (cell["baseline_pass_rate"], cell["pass_rate"]) == (1.0, 0.5)
    assert cell["baseline_pass_rate_ci"] == [0.5101, 1.0] and cell["below_baseline"] is True

    # The other way round, the same case was fixed.
    out, _, _ = _eval("compare", str(third.public_id), first, "--json")
    assert json.loads(out)["fixed"] == 1


def test_a_flip_within_the_baseline_interval_is_listed_but_does_not_fail_the_gate(
    admin: User, tmp_path: Path
) -> None:
    """One case of three flipping (3/3 → 2/3) stays inside 3/3's interval [0.44, 1]: the noise a
    gate on any single case would fail CI on. It is listed as regressed; the exit code is 0."""
    three = SUITE + "  - {question: 'Hello there', expect: []}\n"
    path = tmp_path / "three.yaml"
    path.write_text(three.replace("TOOL", "demo/get_weather_forecast"))
    _, _, code = _eval("run", str(path))
    assert code == 0
    path.write_text(three.replace("TOOL", "demo/calculate"))

    out, _, code = _eval("run", str(path), "--json", "--baseline", "latest", "--fail-on-regression")

    assert code == 0
    compared = json.loads(out)["baseline"]
    assert compared["regression"] is False and compared["regressed"] == 1
    cell = compared["cells"][0]
    assert (cell["baseline"], cell["run"], cell["below_baseline"]) == ("3/3", "2/3", False)
    assert cell["baseline_pass_rate_ci"][0] < 2 / 3


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
