"""The tool definitions' tokens are counted one way for every paradigm (``conversations.counting``):
a variant that words a tool more tersely weighs less in every cell, the text-prompt paradigms
(prompt_json, prompt_xml, intent) included, and costs less at the profile's input price, so the
variants' token cost side by side is honest."""

from __future__ import annotations

from collections.abc import Iterator
from decimal import Decimal

import pytest
from django.contrib.auth.models import User
from pytest_django.fixtures import Settings

from conversations.pricing import profile_price_set
from conversations.services import demo_profile_ensure
from inspector.evals.driver import run_execute
from inspector.evals.models import EvalRun
from inspector.evals.selectors import run_results
from inspector.evals.services import run_start, suite_save
from servers import gateway
from tests.factories import UserFactory

pytestmark = pytest.mark.django_db(transaction=True)

PARADIGMS = ("native", "prompt_xml", "prompt_json", "structured", "intent")
SUITE = (
    "name: weight\nmodels: [demo]\n"
    f"paradigms: [{', '.join(PARADIGMS)}]\nservers: [demo]\n"
    "variants: {plain: {}, terse: {demo/get_weather_forecast: {description: Weather.}}}\n"
    "cases:\n  - {question: 'What is 12 * (3 + 4)?', expect: [{tool: demo/calculate}]}\n"
)


@pytest.fixture(autouse=True)
def _embedded(settings: Settings) -> Iterator[None]:
    settings.TURN_RUNNER = "embedded"
    yield
    gateway.close_all()


def test_the_terse_variant_weighs_and_costs_less_than_plain_in_every_paradigm() -> None:
    alice: User = UserFactory(username="alice")
    profile_price_set(
        profile=demo_profile_ensure(),
        input_per_million=Decimal("2.5"),
        output_per_million=Decimal("10"),
        source="a test",
        actor=alice,
    )
    run = run_start(suite=suite_save(owner=alice, text=SUITE), user=alice, concurrency=4, dispatch=False)

    run = run_execute(run=run, poll_seconds=0.05)

    assert run.status == EvalRun.Status.DONE, run.error
    cells = {(cell["paradigm"], cell["variant"]): cell for cell in run_results(run)["cells"]}  # type: ignore[union-attr, index]
    for paradigm in PARADIGMS:
        plain, terse = cells[(paradigm, "plain")], cells[(paradigm, "terse")]
        assert terse["definition_tokens"] > 0, paradigm
        assert terse["definition_tokens"] < plain["definition_tokens"], paradigm
        # Priced as Compare prices them: the definitions' tokens at the input price.
        assert Decimal(plain["definition_cost"]) == Decimal("2.5") * plain["definition_tokens"] / 1_000_000
        assert Decimal(terse["definition_cost"]) < Decimal(plain["definition_cost"]), paradigm


WEATHER_SUITE = (
    "name: wording\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\n"
    "variants: {plain: {}, terse: {demo/get_weather_forecast: {description: Weather.}}}\n"
    "cases:\n  - {question: 'What will the weather be like in Beijing tomorrow?', "
    "expect: [{tool: demo/get_weather_forecast}]}\n"
)


def test_the_definitions_weight_is_reported_per_model_request_whatever_the_outcome() -> None:
    """A case that ends after one request (a no_call) against one of two weighs its definitions
    once: per request, the variants differ by their wording alone."""
    from conversations.models import Step

    alice: User = UserFactory(username="alice")
    run = run_start(suite=suite_save(owner=alice, text=WEATHER_SUITE), user=alice, dispatch=False)
    run = run_execute(run=run, poll_seconds=0.05)

    assert run.status == EvalRun.Status.DONE, run.error
    for cell in run_results(run)["cells"]:  # type: ignore[union-attr]
        one_request = [
            sum(step.tokens["tools"].values())
            for step in Step.objects.filter(turn__conversation__public_id=cell["conversations"][0]).exclude(
                tokens={}
            )  # type: ignore[index]
        ]
        assert one_request and len(set(one_request)) == 1, (
            "every request of a turn carries the same definitions"
        )
        assert cell["definition_requests"] == len(one_request)  # type: ignore[index]
        assert cell["definition_tokens_per_request"] == one_request[0]  # type: ignore[index]
        assert cell["definition_tokens_per_case"] == one_request[0] * len(one_request)  # type: ignore[index]
