"""The official MCP conformance suite against the project: its client through ``manage.py
server`` (tests/conformance/client_adapter.py maps each scenario to CLI commands), and the
bundled demo server over Streamable HTTP.

The suite is ``@modelcontextprotocol/conformance``, pinned in tests/mcp_servers/package.json
and started on Node 20 through tests/conformance/node20/register.mjs. The scenarios are read
from the installed suite, so a version bump that adds one shows up here as a new case. Each
case asserts the suite's own per-check results: any FAILURE fails it and the message lists the
failing checks. Scenarios run side by side in a small pool from the moment the module's first
test asks; each test waits only for its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from pathlib import Path
from typing import Any

import pytest

from servers import demo_server

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SUITE = REPO_ROOT / "tests" / "mcp_servers" / "node_modules" / "@modelcontextprotocol" / "conformance"
ADAPTER = HERE / "client_adapter.py"
# Two cores run this: three scenarios at a time keeps each scenario's own clock (sse-retry
# measures the client's reconnection delay) honest while the rest of a scenario waits on I/O.
WORKERS = 3
SCENARIO_TIMEOUT_MS = 90_000
pytestmark = pytest.mark.slow

# Server scenarios that call a fixture of the suite's reference server by name (a tool, prompt
# or resource the demo server does not have): they test that fixture, not a protocol feature.
NEEDS_SUITE_FIXTURE = {
    "tools-call-simple-text": "the tool test_simple_text",
    "tools-call-image": "the tool test_image_content",
    "tools-call-audio": "the tool test_audio_content",
    "tools-call-embedded-resource": "the tool test_embedded_resource",
    "tools-call-mixed-content": "the tool test_multiple_content_types",
    "tools-call-with-logging": "the tool test_tool_with_logging",
    "tools-call-error": "the tool test_error_handling",
    "tools-call-with-progress": "the tool test_tool_with_progress",
    "tools-call-sampling": "the tool test_sampling",
    "tools-call-elicitation": "the tool test_elicitation",
    "json-schema-2020-12": "the tool json_schema_2020_12_tool",
    "elicitation-sep1034-defaults": "the tool test_elicitation_sep1034_defaults",
    "elicitation-sep1330-enums": "the tool test_elicitation_sep1330_enums",
    "server-sse-polling": "the tool test_reconnection",
    "resources-read-text": "the resource test://static-text",
    "resources-read-binary": "the resource test://static-binary",
    "resources-templates-read": "the resource template test://template/{id}/data",
    "prompts-get-simple": "the prompt test_simple_prompt",
    "prompts-get-with-args": "the prompt test_prompt_with_arguments",
    "prompts-get-embedded-resource": "the prompt test_prompt_with_embedded_resource",
    "prompts-get-with-image": "the prompt test_prompt_with_image",
}
# Server scenarios of one optional capability: they apply when the demo server advertises it.
NEEDS_CAPABILITY = {
    "logging-set-level": ("logging",),
    "completion-complete": ("completions",),
    "tools-list": ("tools",),
    "resources-list": ("resources",),
    "prompts-list": ("prompts",),
    "resources-subscribe": ("resources", "subscribe"),
    "resources-unsubscribe": ("resources", "subscribe"),
}


def conformance(*args: str) -> list[str]:
    node = shutil.which("node") or "node"
    return [node, "--import", str(HERE / "node20" / "register.mjs"), str(SUITE / "dist" / "index.js"), *args]


def listed_scenarios() -> dict[str, list[str]]:
    """The installed suite's own scenario list (`conformance list`), by side; empty if not installed."""
    if not (SUITE / "package.json").exists() or shutil.which("node") is None:
        return {"client": [], "server": []}
    listing = subprocess.run(conformance("list"), capture_output=True, text=True, timeout=60, check=True)
    scenarios: dict[str, list[str]] = {"client": [], "server": []}
    side = ""
    for line in listing.stdout.splitlines():
        if line.startswith("Server scenarios"):
            side = "server"
        elif line.startswith("Client scenarios"):
            side = "client"
        elif side and (match := re.match(r"\s+- (\S+)", line)):
            scenarios[side].append(match.group(1))
    return scenarios


SCENARIOS = listed_scenarios()
CLIENT_AUTH = [name for name in SCENARIOS["client"] if name.startswith("auth/")]
CLIENT_OTHER = [name for name in SCENARIOS["client"] if not name.startswith("auth/")]


def checks_of(folder: Path) -> list[dict[str, Any]]:
    found = sorted(folder.rglob("checks.json"))
    if not found:
        return []
    checks = json.loads(found[-1].read_text())
    return checks if isinstance(checks, list) else []


def verdict(name: str, checks: list[dict[str, Any]], output: str) -> None:
    """Fail with the suite's failing checks (and the end of its output) unless every check passed."""
    failing = [c for c in checks if c.get("status") == "FAILURE"]
    passing = [c for c in checks if c.get("status") == "SUCCESS"]
    if failing or not passing:
        lines = [f"{c.get('id')}: {c.get('errorMessage') or c.get('description')}" for c in failing]
        detail = "\n  ".join(lines) or "no check passed"
        pytest.fail(f"{name}:\n  {detail}\n--- conformance output (tail) ---\n{output[-3000:]}")


# --- the client ---------------------------------------------------------------------------


def run_client_scenario(name: str, out_dir: Path, template: Path) -> tuple[list[dict[str, Any]], str]:
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
    env["CONFORMANCE_TEMPLATE_VAR_DIR"] = str(template)
    completed = subprocess.run(
        conformance(
            "client",
            "--command",
            f"{sys.executable} {ADAPTER}",
            "--scenario",
            name,
            "--timeout",
            str(SCENARIO_TIMEOUT_MS),
            "-o",
            str(out_dir),
        ),
        env=env,
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_MS / 1000 + 30,
        check=False,
    )
    client_output = "".join(
        f"\n--- client {path.name} ---\n{path.read_text(errors='replace')}"
        for path in sorted(out_dir.rglob("std*.txt"))
    )
    return checks_of(out_dir), completed.stdout + completed.stderr + client_output


@pytest.fixture(scope="module")
def client_runs() -> Iterator[dict[str, Future[tuple[list[dict[str, Any]], str]]]]:
    """Every client scenario, started in the pool against one migrated template database."""
    with tempfile.TemporaryDirectory(prefix="conformance-client-") as work:
        template = Path(work) / "template"
        env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
        subprocess.run(
            [sys.executable, str(REPO_ROOT / "manage.py"), "migrate", "--verbosity", "0"],
            env={**env, "VAR_DIR": str(template)},
            cwd=REPO_ROOT,
            check=True,
            timeout=120,
        )
        with ThreadPoolExecutor(max_workers=WORKERS) as pool:
            runs = {
                name: pool.submit(run_client_scenario, name, Path(work) / re.sub(r"\W", "_", name), template)
                for name in CLIENT_OTHER + CLIENT_AUTH
            }
            yield runs
            for future in runs.values():
                future.cancel()


def test_the_pinned_suite_is_installed_and_offers_client_and_server_scenarios() -> None:
    assert (SUITE / "package.json").exists(), "run: make tests/mcp_servers/node_modules/.installed"
    pinned = json.loads((REPO_ROOT / "tests" / "mcp_servers" / "package.json").read_text())
    assert (
        json.loads((SUITE / "package.json").read_text())["version"]
        == (pinned["dependencies"]["@modelcontextprotocol/conformance"])
    )
    assert "initialize" in SCENARIOS["client"] and CLIENT_AUTH
    assert "server-initialize" in SCENARIOS["server"]


@pytest.mark.parametrize("scenario", CLIENT_OTHER)
def test_client_scenario(
    scenario: str, client_runs: dict[str, Future[tuple[list[dict[str, Any]], str]]]
) -> None:
    checks, output = client_runs[scenario].result(timeout=SCENARIO_TIMEOUT_MS / 1000 + 60)
    verdict(scenario, checks, output)


def test_each_cli_command_ends_its_http_session_with_a_delete(
    client_runs: dict[str, Future[tuple[list[dict[str, Any]], str]]],
) -> None:
    # This scenario's server keeps sessions (Mcp-Session-Id) and logs every request it receives.
    checks, output = client_runs["elicitation-sep1034-client-defaults"].result(
        timeout=SCENARIO_TIMEOUT_MS / 1000 + 60
    )
    received = [
        (check.get("details") or {}).get("method")
        for check in checks
        if check.get("id") == "incoming-request"
    ]

    assert "POST" in received and received[-1] == "DELETE", output[-3000:]
    assert "Session termination failed" not in output


@pytest.mark.parametrize("scenario", CLIENT_AUTH)
def test_client_auth_scenario(
    scenario: str, client_runs: dict[str, Future[tuple[list[dict[str, Any]], str]]]
) -> None:
    checks, output = client_runs[scenario].result(timeout=SCENARIO_TIMEOUT_MS / 1000 + 60)
    verdict(scenario, checks, output)


# --- the demo server ----------------------------------------------------------------------


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def initialize(url: str) -> dict[str, Any]:
    """The demo server's answer to ``initialize``: what it advertises."""
    body = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {
            "protocolVersion": "2025-11-25",
            "capabilities": {},
            "clientInfo": {"name": "conformance-tests", "version": "1"},
        },
    }
    request = urllib.request.Request(
        url,
        data=json.dumps(body).encode(),
        headers={"Content-Type": "application/json", "Accept": "application/json, text/event-stream"},
    )
    with urllib.request.urlopen(request, timeout=10) as response:  # noqa: S310 — the test's own server
        text = response.read().decode()
    data = next((line[5:] for line in text.splitlines() if line.startswith("data:")), text)
    result = json.loads(data)["result"]
    return result if isinstance(result, dict) else {}


@pytest.fixture(scope="module")
def demo_server_run() -> Iterator[tuple[dict[str, Any], dict[str, list[dict[str, Any]]], str]]:
    """The demo server over Streamable HTTP, every server scenario of the suite run against it once."""
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with tempfile.TemporaryDirectory(prefix="conformance-server-") as work:
        # Its log goes to a file: a pipe nobody reads would fill and stall the server.
        with open(Path(work) / "server.log", "wb") as log:
            process = subprocess.Popen(
                [sys.executable, "-m", "servers.demo_server", "--http", "--port", str(port)],
                cwd=REPO_ROOT,
                stdout=log,
                stderr=subprocess.STDOUT,
            )
        try:
            advertised = wait_for_initialize(url, process)
            completed = subprocess.run(
                conformance("server", "--url", url, "--suite", "all", "-o", work),
                capture_output=True,
                text=True,
                timeout=300,
                check=False,
            )
            results = {}
            for name in SCENARIOS["server"]:
                pattern = re.compile(rf"server-{re.escape(name)}-\d{{4}}-\d\d-\d\dT")
                folder = next((p for p in Path(work).iterdir() if pattern.match(p.name)), None)
                results[name] = checks_of(folder) if folder else []
        finally:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                # The suite leaves GET streams open, which a graceful shutdown would wait for.
                process.kill()
                process.wait(timeout=5)
        yield advertised, results, completed.stdout + completed.stderr


def wait_for_initialize(url: str, process: subprocess.Popen[bytes]) -> dict[str, Any]:
    """The capabilities the demo server advertises, once it answers."""
    deadline = time.monotonic() + 30
    while True:
        try:
            capabilities = initialize(url).get("capabilities")
            return capabilities if isinstance(capabilities, dict) else {}
        except OSError:
            if time.monotonic() > deadline or process.poll() is not None:
                raise
            time.sleep(0.1)


def applies(scenario: str, advertised: dict[str, Any]) -> str:
    """Why the scenario does not apply to the demo server ("" when it does)."""
    if scenario in NEEDS_SUITE_FIXTURE:
        return f"calls {NEEDS_SUITE_FIXTURE[scenario]} of the suite's reference server"
    path = NEEDS_CAPABILITY.get(scenario, ())
    value: Any = advertised
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    if path and not value:
        return f"the demo server does not advertise {'.'.join(path)}"
    return ""


@pytest.mark.parametrize("scenario", SCENARIOS["server"])
def test_demo_server_scenario(
    scenario: str, demo_server_run: tuple[dict[str, Any], dict[str, list[dict[str, Any]]], str]
) -> None:
    advertised, results, output = demo_server_run
    reason = applies(scenario, advertised)
    if reason:
        # Not applicable, and why is a fact about the demo server, held here: the capability is
        # not advertised (read from its initialize result above), or the fixture the scenario
        # calls is not in its catalogue. A scenario that starts to apply runs instead.
        assert not fixture_offered(scenario), (
            f"{scenario} applies now: {NEEDS_SUITE_FIXTURE[scenario]} exists"
        )
        return
    verdict(scenario, results[scenario], output)


def fixture_offered(scenario: str) -> bool:
    """Whether the demo server offers the reference-server fixture ``scenario`` calls."""
    fixture = NEEDS_SUITE_FIXTURE.get(scenario, "")
    if not fixture:
        return False
    kind, name = fixture.removeprefix("the ").split(" ", 1)
    server = demo_server.build_server()
    listed: list[Any] = asyncio.run(
        server.list_tools()
        if kind == "tool"
        else server.list_prompts()
        if kind == "prompt"
        else server.list_resource_templates()
        if kind == "resource template"
        else server.list_resources()
    )
    names = {
        str(getattr(item, "uriTemplate", None) or getattr(item, "uri", None) or item.name) for item in listed
    }
    return name.removeprefix("template ") in names
