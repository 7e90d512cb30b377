"""The web process's access log: one line per request, written through the redactor, as the
image, compose, the Makefile and the docs serve the app. A recording proxy's path holds its key,
and daphne's own access log writes paths straight to stdout; the app's line shows the key
redacted, never a query string, and no line break or control character a path carries."""

from __future__ import annotations

import json
import re
import shlex
import subprocess
import sys
from pathlib import Path

import httpx
import pytest
from django.contrib.auth import get_user_model

from conversations.proxy.keys import create_key
from tests.servers.proxy.support import proxy_env
from tests.support import REPO_ROOT, free_port, wait_until

pytestmark = pytest.mark.django_db(transaction=True)
# daphne's own access log off: the app writes its own (inspector.access_log).
QUIET = ("-v", "0")


def _dockerfile_command() -> list[str]:
    line = next(
        line for line in (REPO_ROOT / "Dockerfile").read_text().splitlines() if line.startswith("CMD ")
    )
    command: list[str] = json.loads(line.removeprefix("CMD "))
    return command


def _daphne_lines() -> dict[str, str]:
    """Every command line this repository gives for serving the app, by where it is given."""
    found = {"Dockerfile": " ".join(_dockerfile_command())}
    for name in ("Makefile", "docker-compose.yml", "README.md", "docs/deployment.md"):
        lines = [
            line
            for line in (REPO_ROOT / name).read_text().splitlines()
            if "inspector.asgi:application" in line
        ]
        assert lines, f"{name} gives no command that serves the app"
        for number, line in enumerate(lines):
            found[f"{name}:{number}"] = line
    return found


def test_every_command_that_serves_the_app_turns_daphnes_own_access_log_off() -> None:
    for where, line in _daphne_lines().items():
        words = shlex.split(line.split("#")[0].strip().strip('"'))
        at = next(index for index, word in enumerate(words) if word.endswith("daphne"))
        assert tuple(words[at + 1 : at + 3]) == QUIET, f"{where}: {line}"


def test_the_served_apps_access_log_names_each_request_with_the_proxy_key_redacted(tmp_path: Path) -> None:
    _, raw = create_key(get_user_model().objects.create_user("alice"), name="laptop")
    port = free_port()
    arguments = _dockerfile_command()[1:]
    arguments = [
        str(port) if word == "8000" else "127.0.0.1" if word == "0.0.0.0" else word for word in arguments
    ]
    log = tmp_path / "web.log"
    with log.open("w") as out:
        process = subprocess.Popen(
            [sys.executable, "-m", "daphne", *arguments],
            cwd=REPO_ROOT,
            env=proxy_env(tmp_path / "var"),
            stdout=out,
            stderr=subprocess.STDOUT,
        )
    try:
        base = f"http://127.0.0.1:{port}"
        assert wait_until(lambda: _answers(base) or process.poll() is not None, 60) and process.poll() is None
        proxied = httpx.post(
            f"{base}/proxy/{raw}/gemini/v1beta/models/m:generateContent?key=AIzaQUERYSECRET123",
            content=b"{}",
            timeout=30,
        )
        forged = httpx.get(f"{base}/nowhere%0A127.0.0.1:1%20%22GET%20/admin/%22%20200", timeout=30)
        assert wait_until(lambda: log.read_text().count("/nowhere") >= 1, 30)
    finally:
        process.terminate()
        process.wait(30)
    text = log.read_text()

    assert proxied.status_code == 502 and forged.status_code == 404  # no Gemini upstream; no page
    assert raw not in text and "AIzaQUERYSECRET123" not in text
    assert re.search(
        r'"POST /proxy/\[REDACTED:proxy_key\]/gemini/v1beta/models/m:generateContent" 502 \d+ \d+ms', text
    )
    assert '"GET /nowhere\\n127.0.0.1:1 "GET /admin/" 200" 404' in text
    assert not any(line.startswith("127.0.0.1:1 ") for line in text.splitlines())


def _answers(base: str) -> bool:
    try:
        return httpx.get(f"{base}/accounts/login/", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False
