"""``manage.py eval``: the issue's example suite through the command line (the embedded runner,
in this process), with ``--json``, ``--junit`` and ``--min-accuracy``; then ``list`` and ``show``."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import CommandError, call_command
from pytest_django.fixtures import Settings

from conversations.models import Conversation, Step
from inspector.evals.management.commands.eval import EXIT_BELOW_MIN_ACCURACY
from inspector.evals.models import EvalRun, Suite
from inspector.evals.selectors import run_history
from servers import gateway
from tests.factories import UserFactory

EXAMPLE = Path(__file__).parent / "example_suite.json"
PARADIGMS = ("native", "prompt_xml", "prompt_json", "structured", "intent")
FAILURE_KEYS = (
    "wrong_tool",
    "wrong_arguments",
    "no_call",
    "extra_call",
    "parse_failure",
    "validation_failure",
)


@pytest.fixture(autouse=True)
def _embedded(settings: Settings) -> None:
    """The embedded default, also in the Postgres pass (where REDIS_URL would pick Celery)."""
    settings.TURN_RUNNER = "embedded"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    """Pooled stdio sessions would otherwise outlive the test (and its database)."""
    yield
    gateway.close_all()


@pytest.fixture
def admin() -> User:
    """The superuser the command runs as by default."""
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


@pytest.mark.django_db(transaction=True)
def test_the_example_suite_runs_every_cell_and_a_terse_description_changes_the_result_in_every_paradigm(
    admin: User, tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    junit = tmp_path / "results.xml"

    out, err, code = _eval("run", str(EXAMPLE), "--json", "--junit", str(junit), "--min-accuracy", "1.0")

    results: dict[str, Any] = json.loads(out)
    cells = {(cell["paradigm"], cell["variant"]): cell for cell in results["cells"]}
    assert results["status"] == "done"
    assert len(results["cells"]) == 10
    assert {cell["model"] for cell in results["cells"]} == {"demo"}
    for cell in results["cells"]:
        assert cell["cases"] == 3
        assert 0.0 <= cell["accuracy"] <= 1.0
        assert all(isinstance(cell[key], int) for key in FAILURE_KEYS)
        assert len(cell["conversations"]) == 3
        assert cell["input_tokens"] > 0 and cell["latency_ms"] is not None
    assert all(cell["accuracy"] == 1.0 for (_, variant), cell in cells.items() if variant == "plain")
    # The demo routes among several tools by their descriptions, in every paradigm (docs/evals.md
    # §8): "Weather." does not say the tool takes a city or a day, so it answers without a call.
    for paradigm in PARADIGMS:
        terse = cells[(paradigm, "terse")]
        assert (terse["passed"], terse["no_call"]) == (2, 1), paradigm
        assert terse["failures"][0]["case"] == 0, paradigm
        assert "no tool was called" in terse["failures"][0]["reason"], paradigm
    terse = cells[("native", "terse")]
    # A description variant is cheaper: its tool definitions weigh fewer tokens (counted apart
    # where the tools have a field of their own: native and structured).
    assert (
        0 < cells[("native", "terse")]["definition_tokens"] < cells[("native", "plain")]["definition_tokens"]
    )
    assert cells[("prompt_json", "terse")]["input_tokens"] < cells[("prompt_json", "plain")]["input_tokens"]

    # Every case is an ordinary conversation of the user, its tools offered as the variant says.
    conversations = Conversation.objects.filter(public_id__in=terse["conversations"], owner=admin)
    assert conversations.count() == 3
    turn = conversations.get(public_id=terse["failures"][0]["conversation"]).turns.get()
    assert [tool["description"] for tool in turn.tools if tool["name"] == "get_weather_forecast"] == [
        "Weather."
    ]
    connect = Step.objects.get(turn=turn, kind="connect")
    assert "demo/get_weather_forecast: overridden for this conversation (description)" in connect.text

    # Below --min-accuracy: a distinct exit code, after the JSON and the JUnit file were written.
    assert code == EXIT_BELOW_MIN_ACCURACY
    assert "5 cell(s) below the minimum accuracy" in err and "demo · native · terse" in err
    document = ET.fromstring(junit.read_text(encoding="utf-8"))
    assert (document.tag, document.get("tests"), document.get("failures")) == ("testsuites", "30", "5")
    failure = document.find("testsuite/testcase/failure")
    assert failure is not None and failure.get("type") == "no_call"
    # Each row names its cell and question, and how long the case took.
    names = [case.get("name", "") for case in document.iter("testcase")]
    assert any(name.startswith("native/demo/terse: What will the weather") for name in names)
    assert all(float(case.get("time", "-1")) >= 0 for case in document.iter("testcase"))
    # The progress line went to stderr as the run went on.
    assert "[30/30] 100% · 25 passed · 0 running · done" in capfd.readouterr().err

    listed, _, _ = _eval("list")
    assert results["run"] in listed and "25/30 passed" in listed
    shown, _, _ = _eval("show", results["run"], "--json")
    assert json.loads(shown)["cells"] == results["cells"]
    table, _, _ = _eval("show", results["run"])
    assert "intent       terse    2/3     67%       no_call 1" in table
    assert "native       terse    2/3     67%       no_call 1" in table


@pytest.mark.django_db(transaction=True)
def test_a_run_at_or_above_the_minimum_accuracy_exits_zero_and_a_worse_rerun_is_a_regression(
    admin: User, tmp_path: Path
) -> None:
    suite = tmp_path / "small.yaml"
    suite.write_text(
        "name: small\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\n"
        "cases:\n  - {question: 'What is 2 + 2?', expect: [{tool: demo/calculate}]}\n"
    )

    _, _, code = _eval("run", str(suite), "--min-accuracy", "0.5")
    assert code == 0

    # The file changed: it replaces the stored suite of that name, whose runs stay one history.
    suite.write_text(suite.read_text().replace("demo/calculate", "demo/convert_units"))
    out, _, code = _eval("run", str(suite), "--json")
    results = json.loads(out)
    assert code == 0
    assert results["regression"] is True
    assert results["cells"][0]["previous_accuracy"] == 1.0 and results["cells"][0]["wrong_tool"] == 1
    assert EvalRun.objects.filter(suite__name="small").count() == 2
    history = run_history(suite=Suite.objects.get(name="small"))
    assert [(item["accuracy"], item["regression"]) for item in history] == [(1.0, False), (0.0, True)]


@pytest.mark.django_db
def test_a_bad_suite_file_is_refused_naming_the_field(admin: User, tmp_path: Path) -> None:
    suite = tmp_path / "bad.json"
    suite.write_text(EXAMPLE.read_text().replace('"expect": []', '"expect": "nothing"'))

    _, err, code = _eval("run", str(suite))

    assert code == 1
    assert "cases[2].expect: must be a list of expected calls (or []), not a string" in err
    assert not EvalRun.objects.exists()


@pytest.mark.django_db
def test_a_suite_naming_an_unknown_server_or_profile_is_refused_naming_the_field(
    admin: User, tmp_path: Path
) -> None:
    suite = tmp_path / "bad.yaml"
    suite.write_text(
        "name: s\nmodels: [demo, gpt-17]\nparadigms: [native]\ncases: [{question: q, expect: []}]\n"
    )

    _, err, code = _eval("run", str(suite))

    assert code == 1 and "models[1]: no model profile named 'gpt-17'" in err
    suite.write_text(
        "name: s\nmodels: [demo]\nparadigms: [native]\nservers: [nope]\ncases: [{question: q, expect: []}]\n"
    )
    assert "servers[0]: no MCP server named 'nope'" in _eval("run", str(suite))[1]


@pytest.mark.django_db
def test_a_variant_naming_a_tool_the_server_does_not_have_is_refused_naming_the_field(
    admin: User, tmp_path: Path
) -> None:
    suite = tmp_path / "misspelt.json"
    suite.write_text(
        EXAMPLE.read_text().replace(
            '"demo/get_weather_forecast": {"description"', '"demo/get_weather": {"description"'
        )
    )

    _, err, code = _eval("run", str(suite))

    assert code == 1
    assert "variants.terse.demo/get_weather: no such tool" in err
    assert not EvalRun.objects.exists()


@pytest.mark.django_db
def test_a_misspelt_expected_tool_is_refused_naming_the_field_and_the_closest_tool(
    admin: User, tmp_path: Path
) -> None:
    suite = tmp_path / "misspelt.yaml"
    suite.write_text(
        "name: s\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\n"
        "cases: [{question: 'weather in Paris?', expect: [{tool: demo/get_wether_forecast}]}]\n"
    )

    _, err, code = _eval("run", str(suite), "--min-accuracy", "0.5")

    assert code == 1
    assert "cases[0].expect[0].tool: no such tool; did you mean demo/get_weather_forecast?" in err
    assert not EvalRun.objects.exists() and not Suite.objects.exists()


@pytest.mark.django_db
def test_an_unknown_named_tool_is_refused_naming_the_field(admin: User, tmp_path: Path) -> None:
    suite = tmp_path / "named.yaml"
    suite.write_text(
        "name: s\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\ntool_choice: named\n"
        "tool: demo/calculator\ncases: [{question: '2 + 2?', expect: []}]\n"
    )

    _, err, code = _eval("run", str(suite))

    assert code == 1 and "tool: no such tool; did you mean demo/calculate?" in err
    assert not EvalRun.objects.exists()


@pytest.mark.django_db(transaction=True)
def test_a_refused_file_does_not_replace_the_stored_suite_of_its_name(admin: User, tmp_path: Path) -> None:
    good = "name: keepme\nmodels: [demo]\nparadigms: [native]\ncases: [{question: q, expect: []}]\n"
    suite = tmp_path / "keepme.yaml"
    suite.write_text(good)
    assert _eval("run", str(suite))[2] == 0
    stored = Suite.objects.get(name="keepme")

    suite.write_text(good.replace("models: [demo]", "models: [gpt-17]"))
    _, err, code = _eval("run", str(suite))

    assert code == 1 and "models[0]: no model profile named 'gpt-17'" in err
    stored.refresh_from_db()
    assert stored.source == good and stored.definition["models"] == ["demo"]  # type: ignore[index, call-overload]


@pytest.mark.django_db
def test_another_users_run_is_not_shown(admin: User) -> None:
    bob = UserFactory(username="bob")
    run = EvalRun.objects.create(suite=Suite.objects.create(owner=admin, name="s"), owner=admin)

    _, err, code = _eval("show", str(run.public_id), "--user", bob.username)

    assert code == 1 and "no run" in err
    assert "no runs yet" in _eval("list", "--user", "bob")[0]
