"""Connect on a protected HTTP server in a real browser: the redirect to the authorization server
and back to this app's callback, the OAuth debugger with every step and no token, and a second
person who sees none of it and must sign in on their own."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect

from tests.fixtures.oauth_server import FakeAuthorization, Knobs, Served
from tests.inspector.test_browser import PASSWORD, REPO_ROOT, InspectorServer
from tests.inspector.test_browser import page as page  # noqa: F401 — the Chromium page fixture

pytestmark = pytest.mark.browser
BOB_PASSWORD = "bob-browser-password"


@pytest.fixture
def protected(tmp_path: Path) -> Iterator[tuple[InspectorServer, FakeAuthorization]]:
    with Served() as fake:
        fake.knobs = Knobs(auto_approve=False)
        server = InspectorServer(tmp_path)
        server.env["OAUTH_REDIRECT_URL"] = f"{server.base}/servers/oauth/callback/"
        server.set_up()
        for command in (
            ["server", "add", "guarded", "--url", fake.mcp_url],
            [
                "shell",
                "-c",
                f"from django.contrib.auth.models import User; User.objects.create_user('bob', password='{BOB_PASSWORD}')",
            ],
        ):
            subprocess.run(
                [sys.executable, "manage.py", *command],
                cwd=REPO_ROOT,
                env=server.env,
                check=True,
                capture_output=True,
            )
        server.start()
        try:
            yield server, fake
        finally:
            server.stop()


def _log_in(page: Page, base: str, username: str, password: str) -> None:
    page.goto(f"{base}/servers/")
    page.fill("input[name=username]", username)
    page.fill("input[name=password]", password)
    page.click("button[type=submit], input[type=submit]")
    page.wait_for_url("**/servers/")


def test_connect_signs_in_at_the_authorization_server_and_the_debugger_shows_each_step_masked(
    protected: tuple[InspectorServer, FakeAuthorization], page: Page
) -> None:
    server, fake = protected
    _log_in(page, server.base, "admin", PASSWORD)
    page.goto(f"{server.base}/servers/guarded/")
    page.click("#connect")

    page.wait_for_url(lambda url: url.startswith(f"{fake.base}/authorize"))
    page.click("#approve")

    page.wait_for_url("**/servers/guarded/oauth", timeout=30_000)
    expect(page.locator("#grant-state")).to_contain_text("authorized")
    html = page.content()
    for step in ("/.well-known/oauth-protected-resource/mcp", "/register", "/authorize", "/token"):
        assert step in html
    assert fake.tokens and not any(token in html for token in [*fake.tokens, *fake.refresh_tokens])
    assert "code_verifier=••••••" in html

    # Bob sees neither the grant nor its debugger, and signs in on his own.
    assert page.context.browser is not None
    bob = page.context.browser.new_context().new_page()
    _log_in(bob, server.base, "bob", BOB_PASSWORD)
    response = bob.goto(f"{server.base}/servers/guarded/oauth")
    assert response is not None and response.status == 404
    bob.goto(f"{server.base}/servers/guarded/")
    bob.click("#connect")
    bob.wait_for_url(lambda url: url.startswith(f"{fake.base}/authorize"))


def test_a_sign_in_left_without_approving_does_not_block_the_next_connect(
    protected: tuple[InspectorServer, FakeAuthorization], page: Page
) -> None:
    # Each Connect is a flow of its own (its own state): one abandoned at the consent page must
    # neither hold the next Connect back nor take the callback meant for it.
    server, fake = protected
    _log_in(page, server.base, "admin", PASSWORD)
    page.goto(f"{server.base}/servers/guarded/")
    page.click("#connect")
    page.wait_for_url(lambda url: url.startswith(f"{fake.base}/authorize"))
    first = page.url
    page.goto(f"{server.base}/servers/guarded/")  # left without approving

    page.click("#connect")
    page.wait_for_url(lambda url: url.startswith(f"{fake.base}/authorize"), timeout=15_000)
    assert page.url != first  # a new flow, with a state of its own
    page.click("#approve")

    page.wait_for_url("**/servers/guarded/oauth", timeout=30_000)
    expect(page.locator("#grant-state")).to_contain_text("authorized")
    assert fake.tokens

    # The abandoned flow's callback, arriving late, completes nothing and is refused.
    late = page.goto(first.replace(f"{fake.base}/authorize", f"{server.base}/servers/oauth/callback/"))
    assert late is not None and late.status in {400, 404}
