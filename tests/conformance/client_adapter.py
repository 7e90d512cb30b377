"""Glue between the official MCP conformance suite and the project's CLI.

``conformance client --command "python tests/conformance/client_adapter.py" --scenario NAME``
starts the scenario's test server and runs this script with the server's URL as its last
argument, the scenario's name in ``MCP_CONFORMANCE_SCENARIO`` and, for scenarios that hand
the client something (pre-registered credentials, a signing key, an identity provider's
token), a JSON object in ``MCP_CONFORMANCE_CONTEXT``.

This script only maps the scenario to ``manage.py server ...`` commands, each run as a
separate process exactly as a user types them: ``server add``, ``server auth`` with the flags
the scenario calls for, then ``server call`` for the scenario's tool (or ``server tools`` when
the scenario only wants the handshake). It holds no MCP or OAuth logic of
its own. Each run gets a fresh SQLite database in a temporary VAR_DIR, so scenarios running
side by side share nothing; ``CONFORMANCE_TEMPLATE_VAR_DIR`` names a migrated VAR_DIR to copy
instead of migrating (the test suite migrates one once).

The suite's authorization servers approve at once: their authorization endpoint redirects
straight back with a ``code``, which ``server auth`` completes with no person involved.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO_ROOT = Path(__file__).resolve().parents[2]
SERVER = "conformance"
COMMAND_TIMEOUT = 60.0

# The tools each scenario's server offers and the arguments to call them with; elicitation:
# how `server call` answers the server's elicitation/create.
CALLS: dict[str, list[tuple[str, dict[str, object], str]]] = {
    "initialize": [],
    "tools_call": [("add_numbers", {"a": 2, "b": 3}, "")],
    "elicitation-sep1034-client-defaults": [("test_client_elicitation_defaults", {}, "accept-defaults")],
    "sse-retry": [("test_reconnection", {}, "")],
}
# Every auth scenario's server offers this one tool behind its OAuth wall.
AUTH_CALL: tuple[str, dict[str, object], str] = ("test-tool", {}, "")


def manage(var_dir: Path, *args: str) -> int:
    """Run one ``manage.py`` command against this run's own database; echo it and its output."""
    env = {key: value for key, value in os.environ.items() if key not in {"DATABASE_URL", "REDIS_URL"}}
    env["VAR_DIR"] = str(var_dir)
    print(f"$ manage.py {shlex.join(args)}", flush=True)
    completed = subprocess.run(
        [sys.executable, str(REPO_ROOT / "manage.py"), *args],
        env=env,
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=COMMAND_TIMEOUT,
        check=False,
    )
    sys.stdout.write(completed.stdout)
    sys.stderr.write(completed.stderr)
    print(f"(exit {completed.returncode})", flush=True)
    return completed.returncode


def auth_flags(scenario: str, context: dict[str, str], private_key: Path) -> list[str]:
    """The ``server auth`` flags for what the scenario hands the client."""
    if "idp_id_token" in context:
        return [
            "--client-id",
            context["client_id"],
            "--client-secret",
            context["client_secret"],
            "--idp-client-id",
            context["idp_client_id"],
            "--idp-id-token",
            context["idp_id_token"],
            "--idp-issuer",
            context["idp_issuer"],
            "--idp-token-endpoint",
            context["idp_token_endpoint"],
        ]
    if "private_key_pem" in context:
        private_key.write_text(context["private_key_pem"])
        return [
            "--grant",
            "client_credentials",
            "--client-id",
            context["client_id"],
            "--private-key-file",
            str(private_key),
            "--signing-alg",
            context.get("signing_algorithm", "ES256"),
        ]
    if scenario.startswith("auth/client-credentials"):
        return [
            "--grant",
            "client_credentials",
            "--client-id",
            context["client_id"],
            "--client-secret",
            context["client_secret"],
        ]
    if "client_id" in context:
        flags = ["--client-id", context["client_id"]]
        return flags + (["--client-secret", context["client_secret"]] if "client_secret" in context else [])
    if scenario == "auth/basic-cimd":
        # The suite's authorization server accepts any https URL document as a client id.
        return ["--client-metadata-url", "https://conformance-test.local/client-metadata.json"]
    return []


def run(url: str, scenario: str, context: dict[str, str], var_dir: Path) -> int:
    template = os.environ.get("CONFORMANCE_TEMPLATE_VAR_DIR")
    if template:
        shutil.copytree(template, var_dir, dirs_exist_ok=True)
    elif manage(var_dir, "migrate", "--verbosity", "0"):
        return 1
    if manage(var_dir, "server", "add", SERVER, "--url", url):
        return 1
    if scenario.startswith("auth/"):
        status = manage(
            var_dir, "server", "auth", SERVER, *auth_flags(scenario, context, var_dir / "client-key.pem")
        )
        if status:
            return status
        calls = [AUTH_CALL]
    else:
        calls = CALLS.get(scenario, [])
    if not calls:
        # The handshake and a list: what a user does first with a new server.
        return manage(var_dir, "server", "tools", SERVER)
    status = 0
    for tool, arguments, elicitation in calls:
        answer = ["--elicitation", elicitation] if elicitation else []
        status = manage(var_dir, "server", "call", SERVER, tool, "--args", json.dumps(arguments), *answer)
    return status


def main(argv: list[str]) -> int:
    if len(argv) != 2:
        print(
            "usage: client_adapter.py SERVER_URL  (run by `conformance client --command ...`)",
            file=sys.stderr,
        )
        return 2
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    context = json.loads(os.environ.get("MCP_CONFORMANCE_CONTEXT") or "{}")
    with tempfile.TemporaryDirectory(prefix="conformance-") as var_dir:
        return run(argv[1], scenario, context, Path(var_dir))


if __name__ == "__main__":
    sys.exit(main(sys.argv))
