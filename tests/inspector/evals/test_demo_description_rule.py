"""The description-variant suite stays meaningful under the demo's description rule (issue 50,
docs/evals.md §8): a wording that says what the tool takes passes, one that refuses it, says
nothing of it or is empty loses the weather case, whatever its keywords, in every paradigm."""

from __future__ import annotations

import json
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.core.management import CommandError, call_command
from pytest_django.fixtures import Settings

from servers import gateway
from tests.factories import UserFactory

WEATHER_TOOL = "demo/get_weather_forecast"
VARIANTS = {
    "plain": {},
    "skies": {WEATHER_TOOL: {"description": "Tells what the skies will do at a spot on Earth."}},
    "negated": {
        WEATHER_TOOL: {
            "description": "Weather forecast. Never pass a city or a day: this tool takes neither."
        }
    },
    "empty": {WEATHER_TOOL: {"description": ""}},
    "terse": {WEATHER_TOOL: {"description": "Weather."}},
}
# Weather case passed (3/3) or answered without a call (2/3, no_call 1).
PASSES_WEATHER = {"plain": True, "skies": True, "negated": False, "empty": False, "terse": False}
PARADIGMS = ["native", "prompt_xml", "prompt_json", "structured", "intent"]


@pytest.fixture(autouse=True)
def _embedded(settings: Settings) -> None:
    settings.TURN_RUNNER = "embedded"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


@pytest.mark.django_db(transaction=True)
def test_the_issues_four_wordings_come_out_by_fit_not_keywords_in_every_paradigm(tmp_path: Path) -> None:
    # The superuser the command runs as by default.
    UserFactory(username="admin", is_superuser=True, is_staff=True)
    suite = tmp_path / "wordings.json"
    suite.write_text(
        json.dumps(
            {
                "name": "wordings",
                "models": ["demo"],
                "paradigms": PARADIGMS,
                "servers": ["demo"],
                "variants": VARIANTS,
                "cases": [
                    {
                        "question": "What will the weather be like in Beijing tomorrow?",
                        "expect": [{"tool": WEATHER_TOOL, "arguments": {"city": "Beijing"}}],
                    },
                    {"question": "What is 12 * (3 + 4)?", "expect": [{"tool": "demo/calculate"}]},
                    {"question": "Hello there", "expect": []},
                ],
            }
        ),
        encoding="utf-8",
    )
    out = StringIO()
    try:
        call_command("eval", "run", str(suite), "--json", stdout=out, stderr=StringIO())
    except CommandError as error:  # below a minimum would exit non-zero; none is set
        pytest.fail(str(error))

    results: dict[str, Any] = json.loads(out.getvalue())
    cells = {(cell["paradigm"], cell["variant"]): cell for cell in results["cells"]}
    assert results["status"] == "done"
    for paradigm in PARADIGMS:
        for variant, passes in PASSES_WEATHER.items():
            cell = cells[(paradigm, variant)]
            expected = (3, 0) if passes else (2, 1)
            assert (cell["passed"], cell["no_call"]) == expected, (paradigm, variant, cell["failures"])
