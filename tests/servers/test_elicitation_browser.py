"""Elicitation forms in Chromium against server-everything: a number field accepts any number the
requested schema allows (3.14, 95.5), an integer field steps by 1, and the range is the schema's."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.inspector.test_browser import InspectorServer
from tests.inspector.test_browser import page as page  # noqa: F401 — the Chromium page fixture
from tests.servers.test_workbench_browser import _log_in
from tests.servers.test_workbench_browser import inspector_with_everything as inspector_with_everything  # noqa: F401

pytestmark = pytest.mark.browser


def test_a_decimal_number_is_accepted_by_the_elicitation_form_and_reaches_the_server(
    inspector_with_everything: InspectorServer,  # noqa: F811
    page: Page,  # noqa: F811
) -> None:
    base = inspector_with_everything.base
    _log_in(page, base)
    page.goto(f"{base}/servers/everything/")
    page.locator("#list-tools").click()
    tool_link = page.locator("a.tool-name", has_text="trigger-elicitation-request")
    expect(tool_link).to_be_visible(timeout=30_000)
    tool_link.click()
    page.locator("#call").click()
    page.wait_for_url("**/servers/op/*/")

    fields = page.locator(".elicit-fields")
    expect(fields).to_be_visible(timeout=30_000)
    number = fields.locator("input[data-name='number']")
    integer = fields.locator("input[data-name='integer']")
    # The schema's default 3.14 is valid as it stands, and so is 95.5 typed in.
    assert number.evaluate("input => input.checkValidity()") is True
    assert (number.get_attribute("step"), number.get_attribute("min"), number.get_attribute("max")) == (
        "any",
        "0",
        "1000",
    )
    assert (integer.get_attribute("step"), integer.get_attribute("min"), integer.get_attribute("max")) == (
        "1",
        "1",
        "100",
    )
    fields.locator("input[data-name='name']").fill("Ada")
    number.fill("95.5")
    assert number.evaluate("input => input.checkValidity()") is True
    integer.fill("7.5")
    assert integer.evaluate("input => input.checkValidity()") is False
    integer.fill("7")
    page.locator(".elicit-form button[value=accept]").click()

    expect(page.locator("#op-status")).to_have_text("ok", timeout=30_000)
    expect(page.locator(".blocks")).to_contain_text("Favorite Number: 95.5")
    expect(page.locator(".blocks")).to_contain_text("Favorite Integer: 7")
