"""A lecturer's class on a projector, in a real browser: teaching mode fits the screen (field
notes folded to one line, opened by a click or `o`, notes rendered as text, the class view), the
legend's role chips keep their words at a phone's width, a pooled session's later turn links to its
handshake, and the nine points of the class (docs/teaching.md §9) are each shown, readable, in light
and dark at 1920×1080 and 1366×768 — axe-core finding nothing serious on any of their pages.

The server is the one `make run` starts (tests/inspector/test_browser.py); its conversations are
asked with `manage.py ask` before it starts, the provider comparison and the follow-up turn from
the browser (they run in the server's own process, as a class's do)."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import pytest
from playwright.sync_api import Browser, BrowserContext, Page, expect

from tests.inspector.test_browser import PASSWORD, WEATHER, InspectorServer
from tests.inspector.test_browser_teaching import (
    AXE,
    AXE_RUN,
    CONTRAST,
    _manage,
    _overflow,
    browser,
    preference_kept,
)

__all__ = ["browser"]  # the module's Chromium, shared with the teaching tests' fixture

# A lesson's pages, in two themes and two sizes, on a machine the other suites share.
pytestmark = [pytest.mark.browser, pytest.mark.timeout(900)]

PARADIGMS = "native,prompt_xml,prompt_json,structured,intent"
# The measure: a 3-step demo turn in teaching mode was 4,893 px tall at 1920×1080 (2,138
# px measured once folded).
TWO_SCREENS = 2_200
# Compare (three paradigms) was 8,717 px: it shrinks likewise, to about half (4,052 px measured).
COMPARE_MOST = 4_400


@dataclass
class Lesson:
    server: InspectorServer
    weather: str  # the weather question, native: connect, decide (with its tool call), answer
    weather_turn: int
    paradigms: str  # a comparison of every paradigm
    three: str  # a comparison of three paradigms (native, prompt_xml, structured)
    malformed: str
    missing: str
    fallback: str  # auto with no native tools

    def url(self, path: str) -> str:
        return path if path.startswith("http") else f"{self.server.base}{path}"


# Every conversation of the lesson asked in one process (one start of the app, one demo server
# session), then teaching mode turned on for the lecturer: printed as JSON, key to transcript.
ASK_ALL = """
import io, json
from django.contrib.auth import get_user_model
from django.core.management import call_command
from inspector.preferences import preference_set
asked = {}
for key, args in json.loads(%r).items():
    out = io.StringIO()
    call_command("ask", *args, "--json", stdout=out)
    asked[key] = json.loads(out.getvalue())
preference_set(user=get_user_model().objects.get(username="admin"), teaching=True)
print(json.dumps(asked))
"""
QUESTIONS = {
    "weather": [WEATHER],
    "paradigms": [WEATHER, "--compare", PARADIGMS],
    "three": [WEATHER, "--compare", "native,prompt_xml,structured"],
    "malformed": [f"[demo:malformed-json] {WEATHER}"],
    "missing": [f"[demo:missing-argument] {WEATHER}"],
    "fallback": [f"[demo:no-native-tools] {WEATHER}", "--paradigm", "auto"],
}


def _page_of(server: InspectorServer, transcript: dict[str, Any]) -> str:
    return f"{server.base}/c/{transcript['conversation']['id']}/"


@pytest.fixture(scope="module")
def lesson(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Lesson]:
    server = InspectorServer(tmp_path_factory.mktemp("projector"))
    server.set_up()
    printed = _manage(server, "shell", "-c", ASK_ALL % json.dumps(QUESTIONS))
    asked: dict[str, Any] = json.loads(printed.strip().splitlines()[-1])  # after the shell's banner
    server.start()
    try:
        yield Lesson(
            server,
            weather=_page_of(server, asked["weather"]),
            weather_turn=int(asked["weather"]["turns"][0]["id"]),
            paradigms=f"{server.base}/compare/{asked['paradigms']['comparison']}/",
            three=f"{server.base}/compare/{asked['three']['comparison']}/",
            malformed=_page_of(server, asked["malformed"]),
            missing=_page_of(server, asked["missing"]),
            fallback=_page_of(server, asked["fallback"]),
        )
    finally:
        server.stop()


def _signed_in(browser: Browser, lesson: Lesson, *, width: int, height: int, **options: object) -> Page:
    context: BrowserContext = browser.new_context(viewport={"width": width, "height": height}, **options)  # type: ignore[arg-type]
    page = context.new_page()
    page.goto(lesson.url("/accounts/login/"))
    page.fill("input[name=username]", "admin")
    page.fill("input[name=password]", PASSWORD)
    page.click("form.stacked-form button[type=submit]")
    page.wait_for_url(lesson.url("/"))
    return page


@pytest.fixture(scope="module")
def providers(browser: Browser, lesson: Lesson) -> str:
    """The weather turn's **Compare providers** button, followed and sent: the comparison's page."""
    page = _signed_in(browser, lesson, width=1366, height=768)
    page.goto(lesson.weather)
    page.locator(".providers-link").first.click()
    page.wait_for_url("**/compare/?from=*")
    expect(
        page.locator("#compare-providers textarea, #compare-providers input[name=question]").first
    ).to_have_value(WEATHER)
    page.locator("#compare-providers button[type=submit]").click()
    page.wait_for_url("**/compare/*/")
    url = page.url.split("#")[0]
    # The runs finish in the server's runner; the page is read again until all four are in.
    deadline = time.monotonic() + 60
    while page.locator(".wire-formats .wire-column").count() < 4:
        assert time.monotonic() < deadline, "the provider comparison did not finish in 60 s"
        page.wait_for_timeout(500)
        page.goto(url)
    page.context.close()
    return url


def _height(page: Page) -> int:
    return int(page.evaluate("document.documentElement.scrollHeight"))


def _open(page: Page, url: str) -> None:
    page.goto(url)
    page.wait_for_load_state("networkidle")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_a_three_step_turn_in_teaching_mode_fits_in_about_two_projector_screens(
    browser: Browser, lesson: Lesson, scheme: str
) -> None:
    page = _signed_in(browser, lesson, width=1920, height=1080, color_scheme=scheme)
    _open(page, lesson.weather)
    expect(page.locator("html")).to_have_attribute("data-teaching", "on")
    expect(page.locator(".teach-legend")).to_be_visible()
    # The three steps: connect, the model call that selects (its tool call inside), the answer.
    expect(page.locator("section.step")).to_have_count(3)

    assert _height(page) <= TWO_SCREENS, f"the turn is {_height(page)} px tall in teaching mode ({scheme})"
    _open(page, lesson.three)
    assert _height(page) <= COMPARE_MOST, f"Compare is {_height(page)} px tall in teaching mode ({scheme})"


def test_each_field_table_is_one_line_until_a_click_or_o_opens_it_and_says_so(
    browser: Browser, lesson: Lesson
) -> None:
    page = _signed_in(browser, lesson, width=1920, height=1080)
    _open(page, lesson.weather)
    tables = page.locator("details.teach-fields")
    assert tables.count() > 4
    for index in range(tables.count()):
        expect(tables.nth(index)).not_to_have_attribute("open", "")
    decide = page.locator("section.step.kind-decide").first
    first = decide.locator("details.teach-fields").first
    summary = first.locator("summary")
    # One line: the summary alone is shown, no taller than a line of its text.
    box = summary.bounding_box()
    assert box is not None and box["height"] < 2 * float(
        page.evaluate("(e) => parseFloat(getComputedStyle(e).lineHeight) || 20", summary.element_handle())
    )
    expect(first.locator("dl")).to_be_hidden()

    # A click opens it (the summary is a native disclosure: focusable, its state announced).
    summary.click()
    expect(first).to_have_attribute("open", "")
    expect(first.locator(".teach-field").first).to_be_visible()
    summary.click()
    expect(first).not_to_have_attribute("open", "")
    assert page.evaluate("(e) => e.tagName", summary.element_handle()) == "SUMMARY"

    # The keyboard: Enter on the focused summary, and `o` on the current step.
    summary.focus()
    page.keyboard.press("Enter")
    expect(first).to_have_attribute("open", "")
    page.keyboard.press("Enter")
    expect(first).not_to_have_attribute("open", "")
    page.evaluate("document.activeElement.blur()")
    for _ in range(6):  # j moves down the steps to the first model call
        if "is-current" in (decide.get_attribute("class") or "").split():
            break
        page.keyboard.press("j")
    expect(decide).to_have_class(_has("is-current"))
    page.keyboard.press("o")
    for index in range(decide.locator("details.teach-fields").count()):
        expect(decide.locator("details.teach-fields").nth(index)).to_have_attribute("open", "")
    page.keyboard.press("o")
    expect(first).not_to_have_attribute("open", "")

    # Notes are text: their emphasis is a tag, never raw asterisks.
    assert page.locator(".teach em").count() > 0
    assert "*select*" not in page.locator("body").inner_text()


def _has(name: str) -> re.Pattern[str]:
    return re.compile(rf"(^|\s){name}(\s|$)")


def test_the_class_view_hides_what_a_first_lesson_does_not_need_and_is_remembered(
    browser: Browser, lesson: Lesson
) -> None:
    page = _signed_in(browser, lesson, width=1920, height=1080)
    _open(page, lesson.weather)
    toggle = page.locator("#class-view-toggle")
    expect(toggle).to_have_attribute("aria-checked", "false")
    expect(page.locator(".waterfall")).to_be_visible()
    before = _height(page)

    with preference_kept(page):
        toggle.click()
    try:
        expect(page.locator("html")).to_have_attribute("data-class-view", "on")
        expect(toggle).to_have_attribute("aria-checked", "true")
        expect(page.locator(".waterfall")).to_be_hidden()
        expect(page.locator(".step-duration").first).to_be_hidden()
        # What the lesson is about stays: the prompt, the marks, the roles, the legend.
        expect(page.locator(".spliced").first).to_be_visible()
        expect(page.locator(".teach-select .mark-select").first).to_be_visible()
        expect(page.locator(".teach-legend")).to_be_visible()
        assert _height(page) < before
        again = _signed_in(browser, lesson, width=1920, height=1080)
        _open(again, lesson.weather)
        expect(again.locator("html")).to_have_attribute("data-class-view", "on")
        expect(again.locator(".waterfall")).to_be_hidden()
    finally:
        with preference_kept(page):
            page.keyboard.press("c")
        expect(page.locator("html")).to_have_attribute("data-class-view", "off")
    page.reload()
    expect(page.locator("html")).to_have_attribute("data-class-view", "off")


@pytest.mark.parametrize("scheme", ["light", "dark"])
def test_the_legends_role_chips_keep_their_words_on_a_phone(
    browser: Browser, lesson: Lesson, scheme: str
) -> None:
    page = _signed_in(browser, lesson, width=390, height=844, color_scheme=scheme)
    for url in (lesson.weather, lesson.three):
        _open(page, url)
        chips = page.locator(".teach-legend .role")
        expect(chips).to_have_count(4)
        for index in range(4):
            box = chips.nth(index).bounding_box()
            assert box is not None
            # One line, wider than tall: not a column of letters.
            assert box["width"] > box["height"] and box["height"] < 30, (url, index, box)
        assert _overflow(page) == 0
        for name, ratio in page.evaluate(CONTRAST, ".teach-legend .role, .teach-legend dd"):
            assert ratio >= 4.5, f"{url} ({scheme}): {name} has contrast {ratio:.2f}:1"


INITIALIZE = re.compile(r"^initialize$")


def test_a_later_turn_on_a_pooled_session_links_to_the_handshake_shown_in_full(
    browser: Browser, lesson: Lesson
) -> None:
    # The first turn the server's own runner runs, so it opens the demo server's session (the
    # provider comparison, asked later in this module from the browser, would open it first).
    page = _signed_in(browser, lesson, width=1366, height=768)
    page.fill("textarea[name=question]", WEATHER)
    page.locator("form#new-conversation [type=submit]").click()
    page.wait_for_url("**/c/*/")
    conversation = page.url
    expect(page.locator("[id^=turn-status-]").first).to_contain_text("Beijing", timeout=30_000)
    page.fill("#follow-up [name=question]", "And in Paris?")
    page.locator("#follow-up [type=submit]").click()
    expect(page.locator("section.turn")).to_have_count(2, timeout=30_000)
    expect(page.locator("[id^=turn-status-]").nth(1)).to_have_attribute("data-status", "done", timeout=30_000)
    page.reload()

    # The first turn shows its handshake in full: initialize, asked and answered.
    first = page.locator("section.turn").nth(0)
    first.locator("section.step.kind-connect summary.step-head").click()
    handshake = first.locator("article.exchange", has=page.locator(".ex-label", has_text=INITIALIZE))
    expect(handshake).to_be_visible()
    expect(first.locator(".ex-label", has_text="notifications/initialized")).to_be_visible()
    expect(handshake.locator(".ex-request")).to_contain_text("protocolVersion")
    expect(handshake.locator(".ex-response")).to_contain_text("serverInfo")
    # The second says where its session was opened, and the link reaches that handshake.
    second = page.locator("section.turn").nth(1)
    second.locator("section.step.kind-connect summary.step-head").click()
    origin = second.locator(".session-origins li")
    expect(origin).to_contain_text("opened at turn 1")
    expect(second.locator("article.exchange .ex-label", has_text=INITIALIZE)).to_have_count(0)
    origin.locator("a").click()
    page.wait_for_url("**#exchange-*")
    target = page.url.split("#")[1]
    expect(page.locator(f"#{target}")).to_be_visible()
    expect(page.locator(f"#{target} .ex-label")).to_have_text("initialize")
    # The step-through of the first turn opens on the handshake.
    page.goto(conversation)
    page.locator(".walk-link").first.click()
    page.wait_for_url("**/walk")
    expect(page.locator("article.slide")).to_have_attribute("data-layer", "connect")
    expect(page.locator(".slide-title")).to_contain_text("initialize")
    expect(page.locator(".slide-body")).to_contain_text("protocolVersion")


VIEWPORTS = [(1920, 1080), (1366, 768)]


@pytest.mark.parametrize("scheme", ["light", "dark"])
@pytest.mark.parametrize(("width", "height"), VIEWPORTS, ids=["1920x1080", "1366x768"])
def test_a_lecturer_shows_the_nine_points_of_the_class_from_the_browser(
    browser: Browser, lesson: Lesson, providers: str, scheme: str, width: int, height: int
) -> None:
    if not AXE.exists():
        pytest.fail(f"axe-core is not installed at {AXE} (npm ci --prefix tests/mcp_servers)")
    page = _signed_in(browser, lesson, width=width, height=height, color_scheme=scheme, bypass_csp=True)
    shown: dict[str, str] = {}

    def check(url: str) -> None:
        """A page of the lesson: no sideways scroll, teaching on, axe-core finds nothing serious."""
        _open(page, url)
        assert _overflow(page) == 0, f"{url} scrolls sideways at {width} px"
        expect(page.locator("html")).to_have_attribute("data-teaching", "on")
        if url not in shown:
            page.add_script_tag(path=str(AXE))
            found = page.evaluate(AXE_RUN)
            assert not found, f"{url} ({scheme}, {width} px):\n" + "\n".join(found)
            shown[url] = scheme

    # 1 and 9. Tool definitions are prompt text; the spliced prompt, whole.
    check(lesson.weather)
    decide = page.locator("section.step.kind-decide").first
    expect(decide.locator(".spliced")).to_be_visible()
    expect(decide.locator(".token-table summary")).to_contain_text("tool definitions")
    # 3. tool_choice: what each model call sent, in its row's head.
    expect(decide.locator(".tool-choice-sent")).to_contain_text("tool_choice")
    # 4. Selection and execution, and who is who.
    expect(page.locator(".teach-legend .role")).to_have_count(4)
    expect(page.locator(".teach-select .mark-select").first).to_have_text("SELECT")
    expect(page.locator('.teach-execute[data-outcome="execute"] .mark-execute').first).to_have_text("EXECUTE")
    expect(page.locator('.teach-roles[data-sender="Host"][data-receiver="Model"]').first).to_be_visible()
    # 6. The cost of tool definitions: their tokens in every call.
    expect(decide.locator(".token-table summary")).to_contain_text("tokens")

    # 4 and 9, on the step-through: what the model reads, SELECT, EXECUTE — each slide readable.
    page.goto(f"{lesson.weather}turns/{lesson.weather_turn}/walk")
    marks, layers, at = set(), [], 1
    while True:
        slide = page.locator("#slide")
        layers.append(slide.get_attribute("data-layer"))
        marks.update((slide.get_attribute("class") or "").split())
        for name, ratio in page.evaluate(
            CONTRAST, ".slide-title, .slide-explanation, .slide-roles, .slide-body"
        ):
            assert ratio >= 4.5, f"slide {at} ({scheme}): {name} has contrast {ratio:.2f}:1"
        assert _overflow(page) == 0
        if not page.locator("[data-slide-next]").count():
            break
        at += 1
        page.keyboard.press("ArrowRight")
        page.wait_for_url(f"**/walk?at={at}")
    assert "prompt" in layers and {"slide-mark-select", "slide-mark-execute"} <= marks

    # 1 and 2. Every paradigm's prompt beside its reply; the diff of two prompts.
    check(lesson.paradigms)
    expect(page.locator(".compare-sent .sent-run")).to_have_count(5)
    for index in range(5):
        expect(
            page.locator(".compare-sent .sent-run").nth(index).locator(".sent-prompt pre")
        ).not_to_be_empty()
    expect(page.locator(".sent-diff .diff-summary")).to_be_visible()
    # 6. The tool definitions' cost on Compare (their tokens; the money once prices are set).
    expect(page.locator("th", has_text="tool definitions cost")).to_be_attached()

    # 3. The form offers the four tool_choice modes.
    check(lesson.url("/"))
    modes = page.evaluate(
        "Array.from(document.querySelectorAll('#new-conversation [name=tool_choice] option,"
        " #new-conversation input[name=tool_choice]')).map((e) => e.value)"
    )
    assert set(modes) == {"auto", "required", "named", "none"}

    # 5. One call in each provider's format, side by side.
    check(providers)
    expect(page.locator(".wire-formats .wire-column")).to_have_count(4)
    expect(page.locator(".wire-formats mark.wire-name").first).to_be_visible()

    # 7. A parse error and a parameter error: refused before anything was sent, then repaired.
    for url in (lesson.malformed, lesson.missing):
        check(url)
        expect(page.locator(".call.tone-error").first).to_contain_text("rejected")
        expect(page.locator(".call.tone-ok").first).to_contain_text("valid")
        refused = page.locator('.teach-execute[data-outcome="refused"]').first
        expect(refused.locator(".mark-execute")).to_have_text("NOT EXECUTED")
        # Nothing says a refused call ran.
        expect(refused).not_to_contain_text("ran the tool")
        expect(page.locator('.teach-execute[data-outcome="execute"]').first).to_be_visible()

    # 8. The fallback chain: the refused rung, which the turn went on from, and the downgrade.
    check(lesson.fallback)
    expect(page.locator(".fallback-note .fallback-title").first).to_contain_text("native → structured")
    error = page.locator("section.step.kind-error").first
    expect(error).to_contain_text("400")
    expect(error.locator(".teach-step")).to_contain_text("the turn went on")
    expect(error.locator(".teach-step")).not_to_contain_text("ended here")
