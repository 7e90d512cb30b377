"""Storing and starting suites: a secret pasted into a suite is stored redacted, a run's cells and
case runs are all created up front, a run too big or a concurrency below 1 is refused, a variant
naming a tool or parameter the servers do not have is refused naming the field, and a run deleted
with its suite stops its driver."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User

from inspector.evals.driver import run_advance
from inspector.evals.models import EvalCaseResult, EvalCell
from inspector.evals.selectors import conversation_overrides
from inspector.evals.services import run_start, suite_delete, suite_save
from inspector.evals.suites import SuiteError
from servers import gateway
from servers.models import Operation
from tests.factories import ConversationFactory, McpServerFactory, UserFactory

pytestmark = pytest.mark.django_db

SECRET = "sk-proj-" + "a1B2c3D4e5F6g7H8i9J0k1L2"
SUITE = (
    "name: s\nmodels: [demo]\nparadigms: [native, intent]\nservers: [demo]\n"
    "variants: {plain: {}, terse: {demo/calculate: {description: Math.}}}\nrepeats: 2\n"
    f"cases:\n  - {{question: 'my key is {SECRET}: what is 2 + 2?', expect: [{{tool: demo/calculate}}]}}\n"
    "  - {question: hi, expect: []}\n"
)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    """Pooled stdio sessions would otherwise outlive the test (and its database)."""
    yield
    gateway.close_all()


@pytest.fixture
def alice() -> User:
    user: User = UserFactory(username="alice")
    return user


def test_a_secret_in_a_suite_is_stored_and_asked_redacted(alice: User) -> None:
    suite = suite_save(owner=alice, text=SUITE)

    assert SECRET not in suite.source and SECRET not in str(suite.definition)
    assert "[REDACTED:api_key]" in suite.definition["cases"][0]["question"]  # type: ignore[index, call-overload]
    run = run_start(suite=suite, user=alice, dispatch=False)
    assert not EvalCaseResult.objects.filter(question__contains=SECRET).exists()
    assert run.total == 2 * 2 * 2 * 2


def test_a_run_creates_every_cell_and_case_run_pending(alice: User) -> None:
    run = run_start(
        suite=suite_save(owner=alice, text=SUITE), user=alice, repeats=1, concurrency=2, dispatch=False
    )

    cells = list(EvalCell.objects.filter(run=run).values_list("paradigm", "variant", "overrides"))
    assert cells == [
        ("native", "plain", {}),
        ("native", "terse", {"demo/calculate": {"description": "Math."}}),
        ("intent", "plain", {}),
        ("intent", "terse", {"demo/calculate": {"description": "Math."}}),
    ]
    assert EvalCaseResult.objects.filter(cell__run=run, status="pending").count() == run.total == 8
    assert (run.status, run.concurrency, run.repeats) == ("queued", 2, 1)


def test_a_concurrency_below_one_is_refused(alice: User) -> None:
    with pytest.raises(ValueError, match="at least 1"):
        run_start(suite=suite_save(owner=alice, text=SUITE), user=alice, concurrency=0, dispatch=False)


def test_a_run_of_too_many_case_runs_is_refused(alice: User) -> None:
    many = "".join(f"  - {{question: q{index}, expect: []}}\n" for index in range(1000))
    text = (
        "name: big\nmodels: [demo]\nparadigms: [native, prompt_json, prompt_xml]\nrepeats: 2\ncases:\n" + many
    )

    with pytest.raises(SuiteError, match="at most 5000"):
        run_start(suite=suite_save(owner=alice, text=text), user=alice, dispatch=False)


def test_a_step_of_a_run_deleted_with_its_suite_stops_its_driver(alice: User) -> None:
    run = run_start(suite=suite_save(owner=alice, text=SUITE), user=alice, dispatch=False)

    suite_delete(suite=run.suite, actor=alice)

    assert run_advance(run=run, driver="celery:chain") is True


def _with_variant(overrides: str) -> str:
    return SUITE.replace("terse: {demo/calculate: {description: Math.}}", f"terse: {{{overrides}}}")


def test_a_variant_naming_a_tool_the_server_does_not_have_is_refused_naming_the_field(alice: User) -> None:
    suite = suite_save(owner=alice, text=_with_variant("demo/get_weather: {description: Weather.}"))

    with pytest.raises(SuiteError) as refused:
        run_start(suite=suite, user=alice, dispatch=False)

    assert refused.value.field == "variants.terse.demo/get_weather"
    assert str(refused.value).startswith("variants.terse.demo/get_weather: no such tool")
    assert "demo/get_weather_forecast" in str(refused.value)  # the closest the server has
    assert not EvalCell.objects.exists()
    # Checked against what the server lists now, and that listing is on the record.
    listing = Operation.objects.get(kind=Operation.Kind.TOOLS_LIST, user=alice)
    assert listing.status == Operation.Status.OK


def test_a_variant_naming_a_parameter_the_tool_does_not_take_is_refused_naming_the_field(
    alice: User,
) -> None:
    suite = suite_save(
        owner=alice,
        text=_with_variant("demo/get_weather_forecast: {parameters: {city: Where., town: Which town.}}"),
    )

    with pytest.raises(SuiteError) as refused:
        run_start(suite=suite, user=alice, dispatch=False)

    assert refused.value.field == "variants.terse.demo/get_weather_forecast.parameters.town"
    assert "no such parameter" in str(refused.value) and "city, day" in str(refused.value)
    assert not EvalCell.objects.exists()


def test_a_variant_naming_a_server_the_suite_does_not_use_is_refused_naming_the_field(
    alice: User,
) -> None:
    suite = suite_save(owner=alice, text=SUITE.replace("servers: [demo]\n", ""))

    with pytest.raises(
        SuiteError, match=r"^variants\.terse\.demo/calculate: .*not among the suite's servers"
    ):
        run_start(suite=suite, user=alice, dispatch=False)


def test_a_variant_of_tools_and_parameters_the_server_has_starts(alice: User) -> None:
    suite = suite_save(
        owner=alice,
        text=_with_variant("demo/get_weather_forecast: {description: Weather., parameters: {city: Where.}}"),
    )

    run = run_start(suite=suite, user=alice, dispatch=False)

    assert EvalCell.objects.filter(run=run).count() == 4


def test_a_variant_of_a_server_whose_tools_cannot_be_listed_is_refused_naming_the_server(alice: User) -> None:
    McpServerFactory(name="gone", args=["-c", "pass"], allow_non_staff_spawn=True)  # exits at once
    text = SUITE.replace("servers: [demo]", "servers: [gone]").replace("demo/calculate", "gone/calculate")
    suite = suite_save(owner=alice, text=text)

    with pytest.raises(SuiteError) as refused:
        run_start(suite=suite, user=alice, dispatch=False)

    assert refused.value.field == "servers[0]"
    assert "its tools could not be listed to check the tools the suite names" in str(refused.value)
    assert not EvalCell.objects.exists()


def test_a_conversation_running_a_case_gets_its_cells_overrides_and_any_other_none(alice: User) -> None:
    """What every turn asks (``tool_overrides_for``, through a compiled read): the overrides of
    the cell the conversation runs a case of; an ordinary conversation has none."""
    run = run_start(
        suite=suite_save(owner=alice, text=SUITE), user=alice, repeats=1, concurrency=2, dispatch=False
    )
    terse, plain, ordinary = (ConversationFactory(owner=alice) for _ in range(3))
    for conversation, variant in ((terse, "terse"), (plain, "plain")):
        result = EvalCaseResult.objects.filter(cell__run=run, cell__variant=variant).order_by("pk").first()
        assert result is not None
        result.conversation = conversation
        result.save(update_fields=["conversation"])

    assert conversation_overrides(terse) == {"demo/calculate": {"description": "Math."}}
    assert conversation_overrides(plain) == {} and conversation_overrides(ordinary) == {}
