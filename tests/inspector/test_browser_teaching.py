"""A real browser and teaching mode, the step-through, the scenarios, the capability reset, dark
mode, the layout at 390, 1280 and 1440 px, the site's 404 and the keyboard (the server as
`make run` starts it; one server for the module, its conversation asked with `manage.py ask`)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Locator, Page, expect, sync_playwright

from tests.inspector.test_browser import (
    CHROMIUM,
    CHROMIUM_ARGS,
    PASSWORD,
    REPO_ROOT,
    WEATHER,
    InspectorServer,
)

pytestmark = pytest.mark.browser

LEARNED = (
    "from conversations.models import ModelProfile, LearnedCapability; "
    "p, _ = ModelProfile.objects.update_or_create(name='ollama gemma', defaults=dict(model='gemma', "
    "base_url='http://127.0.0.1:9/v1', native_tools='no')); "
    "LearnedCapability.objects.update_or_create(profile=p, capability='native_tools', "
    "defaults=dict(reason='the provider refused native (gemma does not support tools)'))"
)


@dataclass
class Setting:
    server: InspectorServer
    conversation: str  # the weather conversation's page
    turn: int
    comparison: str = ""  # a comparison's page (native, prompt_xml, structured)
    operation: str = ""  # a workbench operation's page (a call of the demo server's calculate)

    @property
    def walk(self) -> str:
        return f"{self.conversation}turns/{self.turn}/walk"


def _manage(server: InspectorServer, *args: str) -> str:
    done = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=server.env,
        check=True,
        capture_output=True,
        text=True,
    )
    return done.stdout


@pytest.fixture(scope="module")
def setting(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Setting]:
    server = InspectorServer(tmp_path_factory.mktemp("teaching"))
    server.set_up()
    transcript = json.loads(_manage(server, "ask", WEATHER, "--json"))
    compared = json.loads(
        _manage(server, "ask", WEATHER, "--compare", "native,prompt_xml,structured", "--json")
    )
    called = json.loads(
        _manage(
            server,
            "server",
            "call",
            "demo",
            "calculate",
            "--args",
            '{"expression": "12 * (3 + 4)"}',
            "--json",
        )
    )
    _manage(server, "shell", "-c", LEARNED)
    server.start()
    try:
        public_id = transcript["conversation"]["id"]
        yield Setting(
            server,
            f"{server.base}/c/{public_id}/",
            int(transcript["turns"][0]["id"]),
            comparison=f"{server.base}/compare/{compared['comparison']}/",
            operation=f"{server.base}/servers/op/{called['operation']}/",
        )
    finally:
        server.stop()


@pytest.fixture(scope="module")
def browser() -> Iterator[Browser]:
    if not Path(CHROMIUM).exists():
        pytest.fail(f"Chromium is not installed at {CHROMIUM} (apt-get install chromium)")
    with sync_playwright() as playwright:
        launched = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=CHROMIUM_ARGS)
        yield launched
        launched.close()


def _signed_in(
    browser: Browser, setting: Setting, *, width: int = 1440, height: int = 900, **options: object
) -> Page:
    context: BrowserContext = browser.new_context(viewport={"width": width, "height": height}, **options)  # type: ignore[arg-type]
    page = context.new_page()
    page.goto(f"{setting.server.base}/accounts/login/")
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("form.stacked-form button[type=submit]")
    page.wait_for_url(f"{setting.server.base}/")
    return page


def _unfold(field: Locator) -> None:
    """Open the folded field notes ``field`` is in, with a click on their one-line summary."""
    field.locator("xpath=ancestor::details[contains(@class, 'teach-fields')][1]/summary").click()


def preference_kept(page: Page) -> Any:
    """Waits, on leaving the block, for the answer to the preference POST made inside it. A switch
    kept by a POST the page does not wait for (class view, theme) needs it: "networkidle", once
    reached, is not waited for again, and a reload could overtake the POST."""
    return page.expect_response(
        lambda response: response.request.method == "POST" and "/accounts/preferences" in response.url,
        timeout=30_000,
    )


def _overflow(page: Page) -> int:
    """How far the page scrolls sideways (0: it does not)."""
    return int(page.evaluate("document.documentElement.scrollWidth - document.documentElement.clientWidth"))


def test_teaching_mode_shows_roles_notes_and_the_two_moments_and_is_remembered(
    browser: Browser, setting: Setting
) -> None:
    page = _signed_in(browser, setting)
    page.goto(setting.conversation)
    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing")
    # Off: the page carries no teaching layer at all (not merely hidden).
    expect(page.locator(".teach, .teach-legend, .teach-roles")).to_have_count(0)

    page.locator("#teaching-toggle").click()

    expect(page.locator("html")).to_have_attribute("data-teaching", "on")
    expect(page.locator(".teach-legend")).to_be_visible()
    expect(page.locator(".teach-legend")).to_contain_text("Client")
    model_call = page.locator('.teach-roles[data-sender="Host"][data-receiver="Model"]').first
    expect(model_call).to_be_visible()
    expect(model_call).to_contain_text("not a party to MCP")
    page.locator("section.step.kind-connect summary.step-head").click()
    expect(page.locator('.teach-roles[data-sender="Client"][data-receiver="Server"]').first).to_be_visible()
    expect(page.locator(".teach-select .mark-select").first).to_have_text("SELECT")
    expect(page.locator(".teach-execute .mark-execute").first).to_have_text("EXECUTE")
    tool_calls = page.locator(".teach-field", has=page.locator("dt code", has_text="tool_calls")).first
    # Each body's notes are one folded line until opened (a projector's page stays short).
    expect(tool_calls).to_be_hidden()
    _unfold(tool_calls)
    expect(tool_calls).to_be_visible()
    expect(tool_calls.locator("dd")).to_contain_text("selects")
    expect(tool_calls.locator("dd em")).to_have_text("selects")
    expect(tool_calls.locator("dd a.spec")).to_have_attribute(
        "href", "https://platform.openai.com/docs/guides/function-calling"
    )
    jsonrpc = page.locator(".teach-field dt code", has_text="jsonrpc").first
    _unfold(jsonrpc)
    expect(jsonrpc).to_be_visible()
    expect(page.locator(".teach-field.no-note")).to_have_count(0)
    # The turn's timeline: one bar per call, drawn by the server.
    expect(page.locator(".waterfall-chart .wf-bar")).to_have_count(4)
    expect(page.locator(".waterfall-chart .wf-tool rect:not(.wf-wire)")).to_be_visible()

    # Remembered: in a new browser session too; and off again.
    again = _signed_in(browser, setting)
    again.goto(setting.conversation)
    expect(again.locator("html")).to_have_attribute("data-teaching", "on")
    expect(again.locator(".teach-legend")).to_be_visible()
    again.keyboard.press("t")
    expect(again.locator(".teach-legend")).to_have_count(0)
    expect(again.locator(".teach")).to_have_count(0)
    again.wait_for_load_state("networkidle")
    again.reload()
    expect(again.locator("html")).to_have_attribute("data-teaching", "off")


def test_the_step_through_shows_one_layer_at_a_time_in_large_type(browser: Browser, setting: Setting) -> None:
    page = _signed_in(browser, setting)
    page.goto(setting.conversation)
    page.locator(".walk-link").first.click()
    page.wait_for_url("**/walk")

    expect(page.locator(".walk-position")).to_contain_text("slide 1 of")
    expect(page.locator("article.slide")).to_have_count(1)
    title_size = float(
        page.evaluate("parseFloat(getComputedStyle(document.querySelector('.slide-title')).fontSize)")
    )
    assert title_size >= 30
    layers = [page.locator("article.slide").get_attribute("data-layer")]
    while page.locator("[data-slide-next]").count():
        page.keyboard.press("ArrowRight")
        page.wait_for_url(f"**/walk?at={len(layers) + 1}")
        layers.append(page.locator("article.slide").get_attribute("data-layer"))
    assert layers[0] == "connect" and layers[-1] == "answer"
    assert "parsed" in layers and "rpc_request" in layers
    page.goto(f"{page.url.split('?')[0]}?at={layers.index('parsed') + 1}")
    expect(page.locator(".slide-title .mark-select")).to_have_text("SELECT")
    expect(page.locator(".slide-explanation")).to_be_visible()
    page.keyboard.press("ArrowLeft")
    page.wait_for_url(f"**/walk?at={layers.index('parsed')}")
    assert _overflow(page) == 0


@pytest.mark.parametrize(
    ("scenario", "marker"),
    [("Malformed JSON", "malformed-json"), ("Missing argument", "missing-argument")],
    ids=["a parse error", "a parameter error"],
)
def test_a_scenario_chosen_by_name_makes_the_demo_model_err_and_the_error_is_repaired(
    browser: Browser, setting: Setting, scenario: str, marker: str
) -> None:
    page = _signed_in(browser, setting)
    page.fill("textarea[name=question]", WEATHER)
    page.locator("label", has_text=f"{scenario} — ").click()
    page.locator("form#new-conversation [type=submit]").click()
    page.wait_for_url("**/c/*/")

    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing", timeout=30_000)
    expect(page.locator(".turn .question")).to_contain_text(f"[demo:{marker}]")
    # The model's first call is rejected, said why, and sent back; its next call is valid.
    expect(page.locator(".call.tone-error").first).to_contain_text("rejected")
    expect(page.locator(".call.tone-ok").first).to_contain_text("valid")


def test_auto_shows_its_fallback_chain_when_a_scenario_refuses_native_tools(
    browser: Browser, setting: Setting
) -> None:
    page = _signed_in(browser, setting)
    page.fill("textarea[name=question]", WEATHER)
    page.check("form#new-conversation input[name=paradigm][value=auto]")
    page.locator("label", has_text="No native tools — ").click()
    page.locator("form#new-conversation [type=submit]").click()
    page.wait_for_url("**/c/*/")

    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing", timeout=30_000)
    expect(page.locator(".fallback-note .fallback-title").first).to_contain_text("native → structured")
    # The refused request is on the page too: the rung the model said no to.
    expect(page.locator("section.step.kind-error").first).to_contain_text("400")


def test_a_learned_capability_is_shown_with_why_and_reset(browser: Browser, setting: Setting) -> None:
    page = _signed_in(browser, setting)
    page.locator(".site-links a", has_text="Models").click()

    learned = page.locator("tr.learned", has_text="gemma does not support tools")
    expect(learned).to_contain_text("native_tools")
    learned.locator("button", has_text="Reset native_tools").click()

    expect(page.locator(".message-success")).to_contain_text("native_tools is unknown again")
    expect(page.locator("tr.learned")).to_have_count(0)
    row = page.locator("tr", has_text="ollama gemma")
    expect(row.locator(".capability").first).to_have_text("unknown")


def test_dark_mode_follows_the_system_and_the_switch_overrides_it(browser: Browser, setting: Setting) -> None:
    page = _signed_in(browser, setting, color_scheme="dark")
    page.goto(setting.conversation)
    background = "getComputedStyle(document.body).backgroundColor"
    dark = page.evaluate(background)
    assert dark == "rgb(18, 21, 28)"

    with preference_kept(page):
        page.select_option("#theme-select", "light")
    expect(page.locator("html")).to_have_attribute("data-theme", "light")
    assert page.evaluate(background) == "rgb(246, 247, 249)"
    page.reload()
    assert page.evaluate(background) == "rgb(246, 247, 249)"

    with preference_kept(page):
        page.select_option("#theme-select", "dark")
    assert page.evaluate(background) == dark
    with preference_kept(page):
        page.select_option("#theme-select", "system")


@pytest.mark.parametrize(("width", "height"), [(390, 844), (1280, 800), (1440, 900)])
def test_no_page_scrolls_sideways_and_the_first_screen_shows_the_question_and_the_first_decision(
    browser: Browser, setting: Setting, width: int, height: int
) -> None:
    page = _signed_in(browser, setting, width=width, height=height)
    pages = ("/", "/compare/", "/servers/", "/profiles/", setting.conversation, "/no/such/page")
    for path in (*pages, setting.comparison, setting.operation, setting.walk):
        page.goto(path if path.startswith("http") else f"{setting.server.base}{path}")
        assert _overflow(page) == 0, f"{path} scrolls sideways at {width} px"
    page.goto(setting.conversation)
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    expect(page.locator(".site-user button", has_text="Log out")).to_be_in_viewport()
    decide = page.locator("section.step.kind-decide").first
    expect(decide).to_be_visible()
    # Measured in one synchronous script on the step as it is now (a live update may replace it).
    top, boxes = page.evaluate(
        "() => { const e = document.querySelector('section.step.kind-decide');"
        " return [e.getBoundingClientRect().top, Array.from(e.querySelectorAll('.area, .call-name')).map(a => {"
        " const r = a.getBoundingClientRect(); return [a.className, r.left, r.right]; })]; }"
    )
    assert top < height
    areas = [(left, right) for name, left, right in boxes if name.startswith("area")]
    if width >= 1280:
        # Five columns side by side, each wide enough to read, the call name inside its own.
        parsed = next((left, right) for name, left, right in boxes if "area-parsed" in name)
        name_left, name_right = next((left, right) for name, left, right in boxes if name == "call-name")
        assert parsed[1] - parsed[0] >= 180
        assert parsed[0] - 1 <= name_left and name_right <= parsed[1] + 1
        assert len({round(left) for left, _ in areas}) == 3
    else:
        # Stacked: every area starts at the same place and takes the whole width.
        assert len({(round(left), round(right)) for left, right in areas}) == 1


def test_a_missing_page_is_the_sites_own(browser: Browser, setting: Setting) -> None:
    page = _signed_in(browser, setting)

    response = page.goto(f"{setting.server.base}/c/00000000-0000-0000-0000-000000000000/")

    assert response is not None and response.status == 404
    expect(page.locator("#not-found h1")).to_have_text("Nothing here")
    expect(page.locator(".site-nav .brand")).to_be_visible()


def test_the_keyboard_moves_between_steps_opens_them_and_shows_help(
    browser: Browser, setting: Setting
) -> None:
    page = _signed_in(browser, setting)
    page.goto(setting.conversation)
    expect(page.locator("[id^=turn-status-]")).to_contain_text("Beijing")
    expect(page.locator("#live-status")).to_have_attribute("data-state", "live")
    steps = page.locator("section.step")

    page.keyboard.press("j")
    expect(steps.nth(0)).to_have_class(_has("is-current"))
    page.keyboard.press("j")
    expect(steps.nth(1)).to_have_class(_has("is-current"))
    expect(steps.nth(0)).not_to_have_class(_has("is-current"))
    page.keyboard.press("k")
    expect(steps.nth(0)).to_have_class(_has("is-current"))
    page.keyboard.press("j")
    page.keyboard.press("o")
    expect(steps.nth(1).locator("details.payload").first).to_have_attribute("open", "")
    page.keyboard.press("o")
    expect(steps.nth(1).locator("details.payload").first).not_to_have_attribute("open", "")
    page.keyboard.press("?")
    expect(page.locator("#help-dialog")).to_be_visible()
    expect(page.locator("#help-dialog")).to_contain_text("next step")


def _has(name: str) -> re.Pattern[str]:
    return re.compile(rf"(^|\s){name}(\s|$)")


def test_no_slide_of_the_step_through_scrolls_sideways_on_a_phone(browser: Browser, setting: Setting) -> None:
    page = _signed_in(browser, setting, width=390, height=844)
    page.goto(setting.walk)
    expect(page.locator(".walk-position")).to_contain_text("slide 1 of")
    at = 1
    while True:
        assert _overflow(page) == 0, f"slide {at} scrolls sideways at 390 px"
        if not page.locator("[data-slide-next]").count():
            break
        at += 1
        page.keyboard.press("ArrowRight")
        page.wait_for_url(f"**/walk?at={at}")
    assert at > 5


def _within(page: Page, selector: str, width: int) -> None:
    box = page.locator(selector).bounding_box()
    assert box is not None, selector
    assert box["x"] >= 0 and box["x"] + box["width"] <= width, (selector, box)


def test_admin_and_log_out_are_reachable_on_a_phone(browser: Browser, setting: Setting) -> None:
    page = _signed_in(browser, setting, width=390, height=844)
    page.goto(setting.conversation)
    admin = page.locator(".site-links a", has_text="Admin")
    log_out = page.locator(".site-user button", has_text="Log out")

    expect(admin).to_be_visible()
    expect(log_out).to_be_visible()
    _within(page, ".site-links a:has-text('Admin')", 390)
    _within(page, ".site-user button:has-text('Log out')", 390)
    admin.click()
    page.wait_for_url("**/admin/")
    expect(page.locator("#site-name")).to_be_visible()
    page.go_back()
    page.locator(".site-user button", has_text="Log out").click()
    page.wait_for_url("**/accounts/login/**")
    page.goto(setting.conversation)
    assert "/accounts/login/" in page.url


def test_the_teaching_switch_annotates_the_compare_and_workbench_pages(
    browser: Browser, setting: Setting
) -> None:
    page = _signed_in(browser, setting, width=1280, height=800)
    page.goto(setting.comparison)
    expect(page.locator("html")).to_have_attribute("data-teaching", "off")
    expect(page.locator(".teach")).to_have_count(0)

    page.locator("#teaching-toggle").click()

    expect(page.locator("html")).to_have_attribute("data-teaching", "on")
    expect(page.locator(".teach-legend")).to_be_visible()
    reply = page.locator(".compare-sent .sent-run").first.locator(".sent-reply")
    expect(reply.locator('.teach-roles[data-sender="Host"][data-receiver="Model"]')).to_be_visible()
    finish_reason = reply.locator(".teach-field dt code", has_text="finish_reason")
    _unfold(finish_reason)
    expect(finish_reason).to_be_visible()
    expect(page.locator(".teach-field.no-note")).to_have_count(0)
    assert _overflow(page) == 0
    # The last model call of each run, annotated the same way.
    page.select_option(".sent-call-pick select[name=call]", "last")
    page.locator(".sent-call-pick button").click()
    page.wait_for_url("**call=last**")
    expect(page.locator(".compare-sent .sent-position").first).to_contain_text("model call 2 of 2")
    expect(page.locator(".compare-sent .teach-roles").first).to_be_visible()

    page.goto(setting.operation)
    expect(page.locator("html")).to_have_attribute("data-teaching", "on")
    call = page.locator(
        '.teach-roles[data-sender="Client"][data-receiver="Server"]', has_text="EXECUTE"
    ).first
    expect(call).to_be_visible()
    jsonrpc = page.locator(".teach-field dt code", has_text="jsonrpc").first
    _unfold(jsonrpc)
    expect(jsonrpc).to_be_visible()
    expect(page.locator(".teach-field dt code", has_text="isError").first).to_be_attached()
    expect(page.locator(".teach-field.no-note")).to_have_count(0)
    assert _overflow(page) == 0

    # Off again, from the workbench: the layer is gone, here and on Compare.
    page.locator("#teaching-toggle").click()
    expect(page.locator("html")).to_have_attribute("data-teaching", "off")
    expect(page.locator(".teach")).to_have_count(0)
    page.wait_for_load_state("networkidle")
    page.goto(setting.comparison)
    expect(page.locator(".teach")).to_have_count(0)


# The WCAG contrast ratio of an element's text against the first opaque background behind it.
CONTRAST = """(selector) => {
  const rgb = (value) => (value.match(/[\\d.]+/g) || []).map(Number);
  const luminance = ([r, g, b]) => {
    const [R, G, B] = [r, g, b].map((c) => { c /= 255; return c <= 0.03928 ? c / 12.92 : ((c + 0.055) / 1.055) ** 2.4; });
    return 0.2126 * R + 0.7152 * G + 0.0722 * B;
  };
  return [...document.querySelectorAll(selector)].map((element) => {
    let behind = element;
    let background = [255, 255, 255];
    while (behind) {
      const parts = rgb(getComputedStyle(behind).backgroundColor);
      if (parts.length === 3 || (parts.length === 4 && parts[3] === 1)) { background = parts.slice(0, 3); break; }
      behind = behind.parentElement;
    }
    const [a, b] = [luminance(rgb(getComputedStyle(element).color).slice(0, 3)), luminance(background)];
    return [element.className, (Math.max(a, b) + 0.05) / (Math.min(a, b) + 0.05)];
  });
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_every_slide_of_the_step_through_is_readable_in_both_themes(
    browser: Browser, setting: Setting, scheme: str
) -> None:
    page = _signed_in(browser, setting, color_scheme=scheme)
    page.goto(setting.walk)
    expect(page.locator(".walk-position")).to_contain_text("slide 1 of")
    at, marked = 1, set()
    while True:
        marked.update(page.locator("#slide").get_attribute("class").split())
        for name, ratio in page.evaluate(
            CONTRAST, ".slide-title, .slide-explanation, .slide-roles, .slide-body"
        ):
            assert ratio >= 4.5, f"slide {at} ({scheme}): {name} has contrast {ratio:.2f}:1"
        if not page.locator("[data-slide-next]").count():
            break
        at += 1
        page.keyboard.press("ArrowRight")
        page.wait_for_url(f"**/walk?at={at}")
    # The slides that teach "the model selects, the host executes" were among those checked.
    assert {"slide-mark-select", "slide-mark-execute"} <= marked


AXE = REPO_ROOT / "tests" / "mcp_servers" / "node_modules" / "axe-core" / "axe.min.js"
# axe-core's serious and critical violations, each with a few of the nodes it found.
AXE_RUN = """async () => {
  const { violations } = await axe.run(document, { resultTypes: ["violations"] });
  return violations
    .filter((v) => v.impact === "serious" || v.impact === "critical")
    .map((v) => `${v.id} (${v.impact}, ${v.nodes.length} nodes): ` +
      v.nodes.slice(0, 4).map((n) => n.target.join(" ") + " — " + (n.failureSummary || "").split("\\n").slice(1, 2).join(" ")).join(" | "));
}"""


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_axe_finds_no_serious_or_critical_violation_on_any_page_in_either_theme(
    browser: Browser, setting: Setting, scheme: str
) -> None:
    if not AXE.exists():
        pytest.fail(f"axe-core is not installed at {AXE} (npm ci --prefix tests/mcp_servers)")
    page = _signed_in(browser, setting, color_scheme=scheme, bypass_csp=True)
    pages = {
        "list": f"{setting.server.base}/",
        "conversation": setting.conversation,
        "compare": setting.comparison,
        "step-through": setting.walk,
        "workbench": setting.operation,
        "evals": f"{setting.server.base}/evals/",
    }
    found = []
    for name, url in pages.items():
        page.goto(url)
        page.wait_for_load_state("networkidle")
        page.add_script_tag(path=str(AXE))
        found.extend(f"{name}: {violation}" for violation in page.evaluate(AXE_RUN))
    assert not found, "\n".join(found)
