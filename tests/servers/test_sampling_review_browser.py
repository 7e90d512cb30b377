"""The sampling review step in Chromium against server-everything (a real stdio server from npm):
its ``trigger-sampling-request`` tool asks for a model call; the user edits the held request and
approves it, then refuses the next one, and the page and the record say what happened."""

from __future__ import annotations

import pytest
from playwright.sync_api import Page, expect

from tests.inspector.test_browser import InspectorServer
from tests.inspector.test_browser import page as page  # noqa: F401 — the Chromium page fixture
from tests.servers.test_workbench_browser import _log_in
from tests.servers.test_workbench_browser import inspector_with_everything as inspector_with_everything  # noqa: F401

pytestmark = pytest.mark.browser


def _call_sampling_tool(page: Page, base: str, prompt: str) -> None:  # noqa: F811
    page.goto(f"{base}/servers/everything/")
    page.locator("#list-tools").click()
    tool_link = page.locator("a.tool-name", has_text="trigger-sampling-request")
    expect(tool_link).to_be_visible(timeout=30_000)
    tool_link.first.click()
    page.locator("#schema-form .sf-field[data-name='prompt'] input").fill(prompt)
    page.locator("#call").click()
    page.wait_for_url("**/servers/op/*/")


def test_a_held_sampling_request_is_edited_and_approved_then_another_is_refused(
    inspector_with_everything: InspectorServer,  # noqa: F811
    page: Page,  # noqa: F811
) -> None:
    base = inspector_with_everything.base
    _log_in(page, base)
    # The review step is a setting of the server, next to its sampling model.
    page.goto(f"{base}/servers/everything/edit")
    page.locator("#id_sampling_profile").select_option(label="demo (demo)")
    page.locator("#id_sampling_review").check()
    page.locator("#server-form button[type=submit]").click()
    page.wait_for_url("**/servers/everything/")

    _call_sampling_tool(page, base, "name a colour")
    review = page.locator(".review-form")
    expect(review).to_be_visible(timeout=30_000)
    expect(page.locator("#op-status")).to_contain_text("running")
    message = review.locator("textarea[name='message-0']")
    assert "name a colour" in message.input_value()
    assert review.locator("textarea[name='systemPrompt']").input_value() == "You are a helpful test server."
    message.fill("Resource trigger-sampling-request context: name a fruit")
    review.locator("input[name='maxTokens']").fill("40")
    # The page keeps polling while the user types: the edit survives a few redraws.
    for _ in range(2):
        with page.expect_response(lambda response: response.url.endswith("/state")):
            pass
    assert "name a fruit" in review.locator("textarea[name='message-0']").input_value()
    review.locator("button[value=approve]").click()

    expect(page.locator("#op-status")).to_have_text("ok", timeout=30_000)
    expect(page.locator(".sampling-review .review-decision")).to_have_text("approved")
    expect(page.locator(".sampling-review")).to_contain_text("by admin")
    expect(page.locator(".sampling-review")).to_contain_text("what you changed")
    model_call = page.locator("article.msg-llm")
    expect(model_call).to_have_count(1)
    assert "name a fruit" in model_call.locator(".msg-body").first.inner_text()
    expect(page.locator(".msg-label", has_text="sampling request approved by admin (edited)")).to_have_count(
        1
    )

    _call_sampling_tool(page, base, "name a city")
    review = page.locator(".review-form")
    expect(review).to_be_visible(timeout=30_000)
    review.locator("button[value=refuse]").click()

    expect(page.locator("#op-status")).not_to_have_text("running", timeout=30_000)
    expect(page.locator(".sampling-review .review-decision")).to_have_text("refused")
    expect(page.locator("article.msg-llm")).to_have_count(0)
    asked = page.locator("article.msg", has=page.locator(".msg-label", has_text="sampling/createMessage"))
    answer = asked.locator(".msg-body").nth(1).inner_text()
    assert "-1" in answer and "User rejected sampling request" in answer
