"""In a real browser, a right-to-left override in a workbench operation's result and in an eval
case's question and reason is a visible marker, and the text after it is laid out in the order
it was stored (each letter to the right of the one before), not reversed; the row that holds it
shows the hidden-characters note."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.inspector.test_browser import PASSWORD, InspectorServer
from tests.inspector.test_browser_teaching import _manage, browser

pytestmark = pytest.mark.browser

__all__ = ["browser"]

OVERRIDE = "Final answer \u202eevil\u202c done"
SHOWN = "Final answer ⟨U+202E⟩evil⟨U+202C⟩ done"

MAKE = f"""
from django.contrib.auth import get_user_model
from servers.models import McpServer, Operation
from inspector.evals.services import suite_save
from inspector.evals_forms import EXAMPLE_SUITE
from tests.inspector.test_evals_views import _finished_run
admin = get_user_model().objects.get(username="admin")
operation = Operation.objects.create(
    server=McpServer.objects.get(name="demo"), user=admin, kind="tools/call", target="echo",
    arguments={{"text": {OVERRIDE!r}}}, status="ok",
    result={{"content": [{{"type": "text", "text": {OVERRIDE!r}}}]}},
)
run = _finished_run(suite_save(owner=admin, text=EXAMPLE_SUITE), question={OVERRIDE!r}, reason={OVERRIDE!r})
print(operation.public_id, run.public_id)
"""

# The left edges of the letters of "evil" in the first text node of ``element`` that holds it.
LETTER_EDGES = """(element) => {
  const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
  for (let node = walker.nextNode(); node; node = walker.nextNode()) {
    const at = node.data.indexOf("evil");
    if (at < 0) continue;
    return [0, 1, 2, 3].map((k) => {
      const range = document.createRange();
      range.setStart(node, at + k);
      range.setEnd(node, at + k + 1);
      return range.getBoundingClientRect().left;
    });
  }
  return null;
}"""


@dataclass
class Pages:
    server: InspectorServer
    operation: str  # the operation's page
    run: str  # the eval run's page


@pytest.fixture(scope="module")
def pages(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Pages]:
    server = InspectorServer(tmp_path_factory.mktemp("hidden"))
    server.set_up()
    operation, run = _manage(server, "shell", "-c", MAKE).splitlines()[-1].split()
    server.start()
    try:
        yield Pages(server, f"{server.base}/servers/op/{operation}/", f"{server.base}/evals/runs/{run}/")
    finally:
        server.stop()


def _signed_in(browser: Browser, pages: Pages) -> Page:
    context: BrowserContext = browser.new_context(viewport={"width": 1440, "height": 900})
    page = context.new_page()
    page.goto(f"{pages.server.base}/accounts/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("form.stacked-form button[type=submit]")
    page.wait_for_url(f"{pages.server.base}/")
    return page


def _reads_as_stored(page: Page, selector: str) -> None:
    element = page.locator(selector).filter(has_text="evil").first
    expect(element).to_contain_text(SHOWN)
    assert "\u202e" not in element.inner_text()
    edges = element.evaluate(LETTER_EDGES)
    assert edges is not None and edges == sorted(edges) and len(set(edges)) == 4, edges


def test_an_override_in_an_operations_result_is_a_marker_and_reverses_nothing(
    browser: Browser, pages: Pages
) -> None:
    page = _signed_in(browser, pages)
    page.goto(pages.operation)

    _reads_as_stored(page, ".block-text pre")
    assert "\u202e" not in page.locator("main").inner_text()
    # The row says so at its top, before anyone opens the arguments or the JSON.
    expect(page.locator(".op-summary > .hidden-chars-note")).to_be_visible()
    expect(page.locator(".op-summary > .hidden-chars-note")).to_contain_text("Hidden characters")


def test_an_override_in_an_eval_case_is_a_marker_and_reverses_nothing(browser: Browser, pages: Pages) -> None:
    page = _signed_in(browser, pages)
    page.goto(pages.run)

    # The failing case's question, and the grader's reason.
    _reads_as_stored(page, "td")
    _reads_as_stored(page, ".failure-reason")
    assert "\u202e" not in page.locator("main").inner_text()
    expect(page.locator("tr.eval-failure .hidden-chars-note")).to_be_visible()
    expect(page.locator(".eval-matrix .hidden-chars-note")).to_have_count(0)
