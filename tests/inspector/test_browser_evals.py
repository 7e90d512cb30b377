"""A real browser on the eval pages, against the real server on the embedded default: a bad suite
is refused naming the field (and the text stays in the box), a good one is saved and run, the
progress bar fills to the end and the results appear without a reload, a failing case opens its
conversation; a second user gets 404 on the suite and the run; a regression planted between two
real runs shows on the comparison page as ``eval compare --json`` has it (and is a 404 to a second
user); and no eval page scrolls sideways on a phone, in dark mode too. One server for the module."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
from playwright.sync_api import Browser, Page, expect

from inspector.evals_forms import EXAMPLE_SUITE
from tests.inspector.test_browser import InspectorServer
from tests.inspector.test_browser_teaching import Setting, _manage, _overflow, _signed_in, browser

pytestmark = pytest.mark.browser

__all__ = ["browser"]

BOB_PASSWORD = "bob-browser-password"
# Two paradigms × two variants × two cases: eight conversations. The calculation case expects the
# weather tool on purpose, so each cell has a failing case to open.
SUITE = {
    "name": "browser-weather",
    "models": ["demo"],
    "paradigms": ["native", "prompt_xml"],
    "servers": ["demo"],
    "variants": {"plain": {}, "terse": {"demo/get_weather_forecast": {"description": "Weather."}}},
    "cases": [
        {
            "question": "What will the weather be like in Beijing tomorrow?",
            "expect": [{"tool": "demo/get_weather_forecast", "arguments": {"city": "Beijing"}}],
        },
        {"question": "What is 12 * (3 + 4)?", "expect": [{"tool": "demo/get_weather_forecast"}]},
    ],
}
BAD_SUITE = json.dumps({**SUITE, "paradigms": ["native", "telepathy"]}, indent=1)


@dataclass
class Evals:
    server: InspectorServer
    suite_url: str = ""
    run_url: str = ""
    compare_url: str = ""


@pytest.fixture(scope="module")
def evals(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Evals]:
    server = InspectorServer(tmp_path_factory.mktemp("evals"))
    server.set_up()
    _manage(
        server,
        "shell",
        "-c",
        "from django.contrib.auth import get_user_model; "
        f"get_user_model().objects.create_user('bob', password={BOB_PASSWORD!r})",
    )
    server.start()
    try:
        yield Evals(server)
    finally:
        server.stop()


def _setting(evals: Evals) -> Setting:
    return Setting(evals.server, f"{evals.server.base}/evals/", 0)


def test_a_suite_is_refused_naming_the_field_then_saved_run_live_and_a_failing_case_opened(
    browser: Browser, evals: Evals
) -> None:
    page = _signed_in(browser, _setting(evals))
    page.locator(".site-links a", has_text="Evals").click()
    page.wait_for_url("**/evals/")

    page.fill("#new-suite textarea[name=document]", BAD_SUITE)
    page.locator("#new-suite [type=submit]").click()
    expect(page.locator("#new-suite .form-errors")).to_contain_text("paradigms[1]")
    expect(page.locator("#new-suite textarea[name=document]")).to_have_value(BAD_SUITE)

    page.fill("#new-suite textarea[name=document]", json.dumps(SUITE, indent=1))
    page.locator("#new-suite [type=submit]").click()
    page.wait_for_url("**/evals/*/")
    evals.suite_url = page.url
    expect(page.locator("h1")).to_contain_text("browser-weather")

    page.fill("#run-suite input[name=concurrency]", "2")
    page.fill("#run-suite input[name=repeats]", "1")
    page.locator("#run-suite [type=submit]").click()
    page.wait_for_url("**/evals/runs/*/")
    evals.run_url = page.url
    page.evaluate(
        "window.__loadedOnce = true; window.__seen = [];"
        "new MutationObserver(() => window.__seen.push(document.getElementById('eval-progress').value))"
        ".observe(document.getElementById('eval-progress-label'), {childList: true, characterData: true, subtree: true})"
    )

    expect(page.locator("#eval-progress-label")).to_contain_text("8 of 8 case runs · 100%", timeout=120_000)
    assert page.evaluate("document.getElementById('eval-progress').value") == 8
    seen = page.evaluate("window.__seen")
    assert any(value < 8 for value in seen), f"the bar never showed a run in progress: {seen}"
    assert seen == sorted(seen)  # it only ever moved forward
    expect(page.locator("#eval-matrix")).to_be_visible(timeout=10_000)
    expect(page.locator("#live-status")).to_have_text("run finished")
    # The results were swapped in by the page itself: it was never reloaded.
    assert page.evaluate("window.__loadedOnce") is True
    expect(page.locator("#eval-matrix td.eval-cell")).to_have_count(4)
    expect(page.locator(".variant[data-variant=terse] .override-text")).to_have_text("Weather.")
    failures = page.locator("#eval-failures .eval-failure")
    assert failures.count() >= 4
    page.screenshot(path=str(evals.server.var_dir / "browser-eval-run.png"), full_page=True)
    first = failures.filter(has_text="12 * (3 + 4)").first
    expect(first.locator(".failure-class")).to_contain_text("wrong tool")

    first.locator("a.failure-conversation").click()
    page.wait_for_url("**/c/*/")
    expect(page.locator("[id^=turn-status-]").first).to_be_visible()
    expect(page.locator("body")).to_contain_text("12 * (3 + 4)")

    page.goto(evals.suite_url)
    expect(page.locator("#history-chart svg rect")).to_have_count(1)
    page.screenshot(path=str(evals.server.var_dir / "browser-eval-suite.png"), full_page=True)
    page.context.close()


@pytest.mark.slow
def test_the_issues_example_suite_runs_from_the_browser_and_a_terse_description_shows(
    browser: Browser, evals: Evals
) -> None:
    page = _signed_in(browser, _setting(evals))
    page.goto(f"{evals.server.base}/evals/")
    expect(page.locator("#new-suite textarea[name=document]")).to_have_value(EXAMPLE_SUITE)
    page.locator("#new-suite [type=submit]").click()
    page.wait_for_url("**/evals/*/")
    page.fill("#run-suite input[name=concurrency]", "8")
    page.locator("#run-suite [type=submit]").click()
    page.wait_for_url("**/evals/runs/*/")

    expect(page.locator("#eval-progress-label")).to_contain_text("30 of 30 case runs · 100%", timeout=240_000)
    cells = page.locator("#eval-matrix td.eval-cell")
    expect(cells).to_have_count(10)  # five paradigms × two variants, every one reporting
    for cell in cells.all():
        expect(cell.locator(".cell-passed")).to_contain_text("of 3 passed")
    # The demo model routes among several tools by their descriptions, in every paradigm
    # (docs/evals.md §8): "Weather." loses the weather case.
    for paradigm in ("native", "prompt_xml", "prompt_json", "structured", "intent"):
        plain = page.locator(f'td.eval-cell[data-paradigm="{paradigm}"][data-variant="plain"]')
        terse = page.locator(f'td.eval-cell[data-paradigm="{paradigm}"][data-variant="terse"]')
        assert float(terse.get_attribute("data-accuracy") or 0) < float(
            plain.get_attribute("data-accuracy") or 0
        )
        expect(terse.locator(".cell-failures")).to_contain_text("no call")
    page.context.close()


def _bob(browser: Browser, evals: Evals) -> Page:
    page = browser.new_context(viewport={"width": 1280, "height": 800}).new_page()
    page.goto(f"{evals.server.base}/accounts/login/")
    page.fill("input[name=username]", "bob")
    page.fill("input[name=password]", BOB_PASSWORD)
    page.click("form.stacked-form button[type=submit]")
    page.wait_for_url(f"{evals.server.base}/")
    return page


def test_another_user_gets_404_on_the_suite_and_the_run(browser: Browser, evals: Evals) -> None:
    if not evals.run_url:
        pytest.fail("the suite was not run (see the test before)")
    page = _bob(browser, evals)
    for url in (evals.suite_url, evals.run_url, evals.run_url + "progress", evals.run_url + "results"):
        response = page.goto(url)
        assert response is not None and response.status == 404, url
    page.goto(f"{evals.server.base}/evals/")
    expect(page.locator("body")).not_to_contain_text("browser-weather")
    page.context.close()


GATE = (
    "name: browser-gate\nmodels: [demo]\nparadigms: [native]\nservers: [demo]\ncases:\n"
    "  - {question: 'What is 2 + 2?', expect: [{tool: demo/calculate}]}\n"
    "  - {question: 'What will the weather be like in Paris today?', expect: [{tool: TOOL}]}\n"
)


def test_a_regression_planted_between_two_real_runs_shows_on_the_comparison_page(
    browser: Browser, evals: Evals, tmp_path: Path
) -> None:
    suite = tmp_path / "gate.yaml"
    suite.write_text(GATE.replace("TOOL", "demo/get_weather_forecast"))
    first = json.loads(_manage(evals.server, "eval", "run", str(suite), "--json"))["run"]
    suite.write_text(GATE.replace("TOOL", "demo/calculate"))  # the weather case now fails
    second = json.loads(_manage(evals.server, "eval", "run", str(suite), "--json"))["run"]
    cli = json.loads(_manage(evals.server, "eval", "compare", first, second, "--json"))
    page = _signed_in(browser, _setting(evals))

    page.goto(f"{evals.server.base}/evals/runs/{second}/")
    expect(page.locator("#compare-baseline")).to_have_value(first)  # the run before, picked
    page.locator("#compare-form [type=submit]").click()
    page.wait_for_url(f"**/evals/runs/{second}/compare?baseline={first}")

    expect(page.locator("#compare-summary")).to_contain_text("1 case regressed, 0 fixed")
    rows = page.locator("tr.compare-case")
    expect(rows).to_have_count(2)
    shown = [
        (row.get_attribute("data-change"), row.locator(".compare-question").inner_text())
        for row in rows.all()
    ]
    assert shown == [(case["change"], case["question"]) for case in cli["cells"][0]["cases"]]
    assert shown[1] == ("regressed", "What will the weather be like in Paris today?")
    expect(page.locator('tr.compare-case[data-change="regressed"]')).to_contain_text("1/1")
    page.screenshot(path=str(evals.server.var_dir / "browser-eval-compare.png"), full_page=True)
    page.context.close()
    evals.compare_url = page.url

    bob = _bob(browser, evals)
    response = bob.goto(evals.compare_url)
    assert response is not None and response.status == 404
    bob.context.close()


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_no_eval_page_scrolls_sideways_on_a_phone(browser: Browser, evals: Evals, scheme: str) -> None:
    if not evals.run_url:
        pytest.fail("the suite was not run (see the first test)")
    page = _signed_in(browser, _setting(evals), width=390, height=844, color_scheme=scheme)
    pages = (evals.compare_url, f"{evals.server.base}/evals/", evals.suite_url, evals.run_url)
    for url in filter(None, pages):
        page.goto(url)
        assert _overflow(page) == 0, f"{url} scrolls sideways at 390 px ({scheme})"
        page.screenshot(
            path=str(evals.server.var_dir / f"browser-eval-{scheme}-{url.count('/')}.png"), full_page=True
        )
    expect(page.locator("#eval-matrix")).to_be_visible()
    if scheme == "dark":
        background = page.evaluate("getComputedStyle(document.querySelector('td.eval-cell')).backgroundColor")
        assert background not in ("rgb(191, 230, 204)", "rgb(248, 208, 203)")  # not the light bands
    page.context.close()
