"""The demo model under the production settings the README documents: a turn's in-process call to
it is not a request from the network, so the host check and the HTTPS redirect do not stand in
its way; a request to ``/demo-model/`` from the network still meets both."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.conf import settings
from django.core.management import call_command
from django.test import Client, override_settings

from servers import gateway
from tests.factories import UserFactory
from tests.inspector.test_browser import InspectorServer
from tests.test_deployment import SECURITY_SETTINGS, _documented_production_env

REPO_ROOT = Path(__file__).resolve().parent.parent
PUBLIC_HOST = "inspector.example.com"
# The README's production block (README.md, "Scaled deployment, in brief") as Django settings.
HARDENED: dict[str, Any] = {
    "DEBUG": False,
    "ALLOWED_HOSTS": [PUBLIC_HOST],
    "CSRF_TRUSTED_ORIGINS": [f"https://{PUBLIC_HOST}"],
    "SECURE_PROXY_SSL_HEADER": ("HTTP_X_FORWARDED_PROTO", "https"),
    "SECURE_SSL_REDIRECT": True,
    "SECURE_HSTS_SECONDS": 31536000,
    "SECURE_HSTS_INCLUDE_SUBDOMAINS": True,
    "SECURE_HSTS_PRELOAD": True,
    "SESSION_COOKIE_SECURE": True,
    "CSRF_COOKIE_SECURE": True,
    "CLIENT_IP_HEADER": "X-Real-IP",
}
COMPLETIONS = "/demo-model/v1/chat/completions"


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    """Pooled stdio sessions would otherwise outlive the test (and its database)."""
    yield
    gateway.close_all()


def _steps_text(turn: dict[str, Any]) -> str:
    return json.dumps(turn["steps"])[:3000]


@pytest.mark.django_db(transaction=True)
@pytest.mark.parametrize(
    "model", ["demo", "demo anthropic", "demo gemini streamed", "demo openai_responses streamed"]
)
def test_a_demo_turn_finishes_under_the_hardened_production_settings(model: str) -> None:
    UserFactory(username="admin", is_superuser=True, is_staff=True)
    out = StringIO()

    with override_settings(**HARDENED):
        call_command("ask", "What is 2+2?", "--model", model, "--json", stdout=out)

    [turn] = json.loads(out.getvalue())["turns"]
    assert turn["status"] == "done", (turn["error"], _steps_text(turn))
    assert "4" in turn["answer"]


@pytest.mark.django_db
def test_the_demo_model_over_http_still_meets_the_host_check_and_the_https_redirect() -> None:
    body = json.dumps({"model": "demo", "messages": [{"role": "user", "content": "What is 2+2?"}]})
    key = {"HTTP_AUTHORIZATION": f"Bearer {settings.DEMO_MODEL_API_KEY}"}
    client = Client()

    with override_settings(**HARDENED):
        foreign_host = client.post(COMPLETIONS, body, content_type="application/json", **key)
        plain_http = client.post(
            COMPLETIONS, body, content_type="application/json", HTTP_HOST=PUBLIC_HOST, **key
        )
        over_https = client.post(
            COMPLETIONS,
            body,
            content_type="application/json",
            HTTP_HOST=PUBLIC_HOST,
            HTTP_X_FORWARDED_PROTO="https",
            **key,
        )

    assert foreign_host.status_code == 400
    assert plain_http.status_code == 301 and plain_http["Location"].startswith(f"https://{PUBLIC_HOST}/")
    assert over_https.status_code == 200, over_https.content
    assert over_https["Strict-Transport-Security"].startswith("max-age=31536000")
    assert over_https.json()["choices"][0]["message"]["content"]


@pytest.mark.timeout(600)  # a migrated set-up made on the process's first use, then a process of its own
def test_manage_py_ask_answers_with_the_readmes_production_settings(tmp_path: Path) -> None:
    """``manage.py ask`` with the README's production block, as an operator runs it after
    ``make setup`` (the embedded default: SQLite, the turn in process)."""
    InspectorServer(tmp_path).set_up()  # migrate and setup_local, made once per test process
    env = {key: value for key, value in os.environ.items() if key not in SECURITY_SETTINGS}
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    env.update(_documented_production_env(), VAR_DIR=str(tmp_path))

    asked = subprocess.run(
        [sys.executable, "manage.py", "ask", "What is 2+2?", "--json"],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )

    assert asked.returncode == 0, asked.stdout[-3000:] + asked.stderr[-3000:]
    [turn] = json.loads(asked.stdout)["turns"]
    assert turn["status"] == "done", (turn["error"], _steps_text(turn))
    assert "4" in turn["answer"]
    assert "DisallowedHost" not in asked.stderr
