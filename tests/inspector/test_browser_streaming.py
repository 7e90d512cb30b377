"""A real browser watches a streamed reply grow on the conversation page, then sees the stored
step replace it (the server as `make run` starts it; the demo model streaming slowly)."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.inspector.test_browser import PASSWORD, REPO_ROOT, InspectorServer, page  # noqa: F401

pytestmark = pytest.mark.browser

# Each streamed event 0.3 s after the one before: the growth is there to be seen.
QUESTION = "[demo:drip=0.3] What will the weather be like in Beijing tomorrow?"
PROFILE = "demo anthropic streamed"
# Every text the partial display showed, in order, recorded by the page itself.
RECORD_PARTIALS = """
window.__partials = [];
new MutationObserver(function () {
  document.querySelectorAll(".partial-text, .partial-arguments").forEach(function (node) {
    var seen = window.__partials;
    var entry = node.className.indexOf("partial-text") !== -1 ? "text:" : "arguments:";
    entry += node.textContent;
    if (node.textContent && seen[seen.length - 1] !== entry) {
      seen.push(entry);
    }
  });
}).observe(document, { subtree: true, childList: true, characterData: true });
"""
CREATE_PROFILE = (
    "from conversations.models import ModelProfile; "
    f"ModelProfile.objects.update_or_create(name={PROFILE!r}, defaults=dict(provider='anthropic', "
    "model='demo', api_key_env='DEMO_MODEL_API_KEY', is_demo=True, stream=True))"
)


@pytest.fixture
def streaming_server(tmp_path: Path) -> Iterator[InspectorServer]:
    server = InspectorServer(tmp_path)
    server.set_up()
    subprocess.run(
        [sys.executable, "manage.py", "shell", "-c", CREATE_PROFILE],
        cwd=REPO_ROOT,
        env=server.env,
        check=True,
        capture_output=True,
    )
    server.start()
    try:
        yield server
    finally:
        server.stop()


def _grows(values: list[str]) -> bool:
    return all(later.startswith(earlier) for earlier, later in zip(values, values[1:], strict=False))


def test_a_streamed_call_and_answer_grow_on_the_page_then_the_stored_steps_replace_them(
    streaming_server: InspectorServer,
    page: Page,  # noqa: F811
) -> None:
    page.add_init_script(RECORD_PARTIALS)
    page.goto(f"{streaming_server.base}/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    page.select_option("form#new-conversation select[name=model_profile]", label=f"{PROFILE} · demo (demo)")
    page.fill("textarea[name=question]", QUESTION)
    page.locator("form#new-conversation [type=submit]").click()
    page.wait_for_url("**/c/*/")

    # Seen while streaming: the call's name, then its arguments, still incomplete.
    expect(page.locator(".partial-stream .partial-name").first).to_have_text(
        "demo__get_weather_forecast", timeout=30_000
    )
    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing", timeout=60_000)

    partials: list[str] = page.evaluate("window.__partials")
    arguments = [p.removeprefix("arguments:") for p in partials if p.startswith("arguments:")]
    texts = [p.removeprefix("text:") for p in partials if p.startswith("text:")]
    assert len(arguments) > 2 and _grows(arguments), arguments
    assert arguments[-1].replace(" ", "") == '{"city":"Beijing","day":"tomorrow"}'
    assert len(texts) > 2 and _grows(texts), texts
    assert "Beijing" in texts[-1]
    # The stored steps replaced the display: nothing streaming is left, the rows hold the record.
    expect(page.locator(".partial-stream")).to_have_count(0)
    expect(page.locator(".rows > [id^=step-]")).to_have_count(3)
    assert "message_start" in (page.locator(".rows").first.text_content() or "")
    page.screenshot(path=str(streaming_server.var_dir / "browser-streaming.png"), full_page=True)


@pytest.mark.parametrize("stream", [False, True], ids=["whole", "streamed"])
def test_compare_providers_from_the_browser_shows_the_call_in_all_four_formats(
    streaming_server: InspectorServer,
    page: Page,  # noqa: F811
    stream: bool,
) -> None:
    page.goto(f"{streaming_server.base}/compare/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("button[type=submit], input[type=submit]")
    form = page.locator("form#compare-providers")
    expect(form.locator("textarea[name=question]")).to_have_value(
        "What will the weather be like in Beijing tomorrow?"
    )
    if stream:
        form.locator("input[name=stream]").check()
    form.locator("[type=submit]").click()
    page.wait_for_url("**/compare/*/")

    expect(page.locator("#compare-columns")).to_have_attribute("data-finished", "true", timeout=90_000)
    for cell in page.locator("td.answered").all():
        expect(cell).to_contain_text("yes")
    columns = page.locator(".wire-column")
    expect(columns).to_have_count(4)
    for provider, key in (
        ("openai_chat", '"tool_calls"'),
        ("openai_responses", '"function_call_output"'),
        ("anthropic", '"tool_result"'),
        ("gemini", '"functionResponse"'),
    ):
        column = page.locator(f'.wire-column[data-provider="{provider}"]')
        expect(column).to_contain_text(key)
        expect(column.locator("mark.wire-name").first).to_contain_text("demo__get_weather_forecast")
    page.screenshot(path=str(streaming_server.var_dir / f"browser-wire-{stream}.png"), full_page=True)
