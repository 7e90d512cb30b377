"""The official MCP conformance suite against the project: its client through ``manage.py
server`` (tests/conformance/client_adapter.py maps each scenario to CLI commands), and the
bundled demo server over Streamable HTTP.

The suite is ``@modelcontextprotocol/conformance``, pinned in tests/mcp_servers/package.json
and started on Node 20 through tests/conformance/node20/register.mjs. The scenarios are read
from the installed suite, so a version bump that adds one shows up here as a new case. Each
case asserts the suite's own per-check results: any FAILURE fails it and the message lists the
failing checks. A server scenario that does not apply to the demo server is not run and not
reported as passed: ``NOT_APPLICABLE`` names it with its reason, and one test holds each reason
to the running server. Every scenario, client and server, runs side by side in one small pool
from the moment the module's first test asks (the demo server and the template database are set
up once); each test waits only for its own.
"""

from __future__ import annotations

import asyncio
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor, wait
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from servers import demo_server
from tests.support import free_port

REPO_ROOT = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
SUITE = REPO_ROOT / "tests" / "mcp_servers" / "node_modules" / "@modelcontextprotocol" / "conformance"
ADAPTER = HERE / "client_adapter.py"
# Two cores run this: three scenarios at a time keeps each scenario's own clock (sse-retry
# measures the client's reconnection delay) honest while the rest of a scenario waits on I/O.
WORKERS = 3
SCENARIO_TIMEOUT_MS = 90_000
pytestmark = pytest.mark.slow

# The demo server's side of the suite: a scenario applies unless it is named here with why not.
# Each reason is a fact about the demo server that ``test_each_scenario_that_does_not_apply_
# has_its_reason`` checks against the running server, so the table cannot go stale silently.
# Scenarios that call a fixture of the suite's reference server by name (a tool, prompt or
# resource the demo server does not have): they test that fixture, not a protocol feature.
NEEDS_SUITE_FIXTURE = {
    "tools-call-simple-text": ("tool", "test_simple_text"),
    "tools-call-image": ("tool", "test_image_content"),
    "tools-call-audio": ("tool", "test_audio_content"),
    "tools-call-embedded-resource": ("tool", "test_embedded_resource"),
    "tools-call-mixed-content": ("tool", "test_multiple_content_types"),
    "tools-call-with-logging": ("tool", "test_tool_with_logging"),
    "tools-call-error": ("tool", "test_error_handling"),
    "tools-call-with-progress": ("tool", "test_tool_with_progress"),
    "tools-call-sampling": ("tool", "test_sampling"),
    "tools-call-elicitation": ("tool", "test_elicitation"),
    "json-schema-2020-12": ("tool", "json_schema_2020_12_tool"),
    "elicitation-sep1034-defaults": ("tool", "test_elicitation_sep1034_defaults"),
    "elicitation-sep1330-enums": ("tool", "test_elicitation_sep1330_enums"),
    "server-sse-polling": ("tool", "test_reconnection"),
    "resources-read-text": ("resource", "test://static-text"),
    "resources-read-binary": ("resource", "test://static-binary"),
    "resources-templates-read": ("resource template", "test://template/{id}/data"),
    "prompts-get-simple": ("prompt", "test_simple_prompt"),
    "prompts-get-with-args": ("prompt", "test_prompt_with_arguments"),
    "prompts-get-embedded-resource": ("prompt", "test_prompt_with_embedded_resource"),
    "prompts-get-with-image": ("prompt", "test_prompt_with_image"),
}
# Scenarios of an optional capability the demo server does not advertise (a path into its
# initialize result's capabilities).
NEEDS_CAPABILITY = {
    "logging-set-level": ("logging",),
    "completion-complete": ("completions",),
    "resources-subscribe": ("resources", "subscribe"),
    "resources-unsubscribe": ("resources", "subscribe"),
}
NOT_APPLICABLE = {
    **{
        name: f"calls the {kind} {fixture} of the suite's reference server"
        for name, (kind, fixture) in NEEDS_SUITE_FIXTURE.items()
    },
    **{
        name: f"the demo server does not advertise {'.'.join(path)}"
        for name, path in NEEDS_CAPABILITY.items()
    },
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
SERVER_APPLICABLE = [name for name in SCENARIOS["server"] if name not in NOT_APPLICABLE]
# Tests that read a scenario's run without being parametrized by it.
NEEDS_SCENARIOS = {
    "test_each_cli_command_ends_its_http_session_with_a_delete": ("elicitation-sep1034-client-defaults",),
    "test_a_step_up_the_server_keeps_refusing_is_said_in_the_users_words": ("auth/scope-retry-limit",),
}


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


def selected(request: pytest.FixtureRequest, names: list[str]) -> list[str]:
    """The scenarios of ``names`` that a selected test of this module waits for (``-k`` runs
    only what it asks for)."""
    wanted: set[str] = set()
    for item in request.session.items:
        if getattr(item, "module", None) is not request.module:
            continue
        callspec = getattr(item, "callspec", None)
        if callspec is not None and "scenario" in callspec.params:
            wanted.add(str(callspec.params["scenario"]))
        wanted.update(NEEDS_SCENARIOS.get(getattr(item, "originalname", item.name), ()))
    return [name for name in names if name in wanted]


@pytest.fixture(scope="module")
def pool() -> Iterator[ThreadPoolExecutor]:
    """One pool for every scenario of the run, the client's and the demo server's: they are
    independent, so the two halves overlap instead of running one after the other."""
    with ThreadPoolExecutor(max_workers=WORKERS) as executor:
        yield executor


@pytest.fixture(scope="module")
def client_runs(
    request: pytest.FixtureRequest, pool: ThreadPoolExecutor, demo_server_run: DemoServerRun
) -> Iterator[dict[str, Future[tuple[list[dict[str, Any]], str]]]]:
    """Every client scenario, queued behind the demo server's (started first: they are few and
    short) against one migrated template database."""
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
        runs = {
            name: pool.submit(run_client_scenario, name, Path(work) / re.sub(r"\W", "_", name), template)
            for name in selected(request, CLIENT_OTHER + CLIENT_AUTH)
        }
        yield runs
        for future in runs.values():
            future.cancel()
        # The scenarios still running use the folder: wait for them before it is removed.
        wait(list(runs.values()))


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


def test_a_step_up_the_server_keeps_refusing_is_said_in_the_users_words(
    client_runs: dict[str, Future[tuple[list[dict[str, Any]], str]]],
) -> None:
    # The scenario's server answers every authorized request 403 insufficient_scope (scope
    # mcp:admin), whatever the token carries; `server auth` must say that, not "an error response".
    checks, output = client_runs["auth/scope-retry-limit"].result(timeout=SCENARIO_TIMEOUT_MS / 1000 + 60)
    attempts = [check for check in checks if check.get("id") == "scope-retry-auth-attempt"]

    assert (
        "the server refused again with 403 insufficient_scope after the client re-authorized with "
        "the scopes it asked for (mcp:admin); the new token carries them, yet the server refuses it"
    ) in output, output[-3000:]
    assert f"stopped after {len(attempts)} authorization attempt" in output
    assert "Server returned an error response" not in output


@pytest.mark.parametrize("scenario", CLIENT_AUTH)
def test_client_auth_scenario(
    scenario: str, client_runs: dict[str, Future[tuple[list[dict[str, Any]], str]]]
) -> None:
    checks, output = client_runs[scenario].result(timeout=SCENARIO_TIMEOUT_MS / 1000 + 60)
    verdict(scenario, checks, output)


# --- the demo server ----------------------------------------------------------------------


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


def run_server_scenario(name: str, url: str, out_dir: Path) -> tuple[list[dict[str, Any]], str]:
    completed = subprocess.run(
        conformance("server", "--url", url, "--scenario", name, "-o", str(out_dir)),
        capture_output=True,
        text=True,
        timeout=SCENARIO_TIMEOUT_MS / 1000 + 30,
        check=False,
    )
    return checks_of(out_dir), completed.stdout + completed.stderr


@dataclass
class DemoServerRun:
    """The demo server over Streamable HTTP: what it advertised, and each applicable scenario's run."""

    url: str
    advertised: dict[str, Any]
    runs: dict[str, Future[tuple[list[dict[str, Any]], str]]]


@pytest.fixture(scope="module")
def demo_server_run(request: pytest.FixtureRequest, pool: ThreadPoolExecutor) -> Iterator[DemoServerRun]:
    """The demo server started once; every scenario that applies runs against it side by side."""
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
            runs = {
                name: pool.submit(run_server_scenario, name, url, Path(work) / re.sub(r"\W", "_", name))
                for name in selected(request, SERVER_APPLICABLE)
            }
            yield DemoServerRun(url, advertised, runs)
            for future in runs.values():
                future.cancel()
            wait(list(runs.values()))
        finally:
            process.terminate()
            try:
                process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                # The suite leaves GET streams open, which a graceful shutdown would wait for.
                process.kill()
                process.wait(timeout=5)


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


@pytest.mark.parametrize("scenario", SERVER_APPLICABLE)
def test_demo_server_scenario(scenario: str, demo_server_run: DemoServerRun) -> None:
    checks, output = demo_server_run.runs[scenario].result(timeout=SCENARIO_TIMEOUT_MS / 1000 + 60)
    verdict(scenario, checks, output)


def catalogue() -> dict[str, set[str]]:
    """The names (URIs for resources) of what the demo server offers, by kind."""
    server = demo_server.build_server()

    async def listed() -> dict[str, set[str]]:
        return {
            "tool": {tool.name for tool in await server.list_tools()},
            "prompt": {prompt.name for prompt in await server.list_prompts()},
            "resource": {str(resource.uri) for resource in await server.list_resources()},
            "resource template": {
                str(template.uri_template) for template in await server.list_resource_templates()
            },
        }

    return asyncio.run(listed())


def test_each_scenario_that_does_not_apply_has_its_reason(demo_server_run: DemoServerRun) -> None:
    """Every server scenario either runs above or is named in ``NOT_APPLICABLE``, and each reason
    there still holds: the capability really is absent from the running server's initialize
    result, the fixture really is absent from its catalogue."""
    offered = catalogue()
    wrong: list[str] = []
    for name in NOT_APPLICABLE:
        if name not in SCENARIOS["server"]:
            wrong.append(f"{name}: no such scenario in the installed suite any more")
    for name, (kind, fixture) in NEEDS_SUITE_FIXTURE.items():
        if fixture in offered[kind]:
            wrong.append(f"{name}: the demo server now offers the {kind} {fixture}; run the scenario")
    for name, path in NEEDS_CAPABILITY.items():
        value: Any = demo_server_run.advertised
        for key in path:
            value = value.get(key) if isinstance(value, dict) else None
        if value:
            wrong.append(f"{name}: the demo server now advertises {'.'.join(path)}; run the scenario")

    assert wrong == [], "\n".join(wrong)
    assert set(SERVER_APPLICABLE) | set(NOT_APPLICABLE) == set(SCENARIOS["server"])
    assert SERVER_APPLICABLE, "no server scenario applies to the demo server"
