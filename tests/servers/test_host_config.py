"""Host configurations in and out: ``server import FILE`` / ``server export`` and the servers
page's import and export, in Claude Desktop / Claude Code / Cursor's ``mcpServers`` shape and VS
Code's ``servers`` shape. All or nothing on import, secrets sealed, never exported in clear."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from conversations.models import AuditEvent
from servers.models import McpServer, Operation
from servers.vault import is_sealed, unseal

pytestmark = [pytest.mark.django_db]

API_KEY = "sk-live-host-config-0123456789abcdef"
TOKEN = "Bearer ghp_hostconfigtoken0123456789"
CLAUDE = {
    "mcpServers": {
        "weather": {
            "command": sys.executable,
            "args": ["-m", "servers.demo_server"],
            "env": {"WEATHER_API_KEY": API_KEY, "REGION": "eu", "HOME_REF": "${HOME}"},
        },
        "remote": {"type": "http", "url": "https://mcp.example.com/mcp", "headers": {"Authorization": TOKEN}},
        "legacy-sse": {"type": "sse", "url": "https://old.example.com/sse"},
    }
}
VSCODE = {
    "inputs": [{"type": "promptString", "id": "key", "password": True}],
    "servers": {
        "docs": {"type": "http", "url": "https://docs.example.com/mcp", "headers": {"X-Key": "${input:key}"}}
    },
}


def _write(tmp_path: Path, document: object, name: str = "mcp.json") -> str:
    path = tmp_path / name
    path.write_text(json.dumps(document) if not isinstance(document, str) else document)
    return str(path)


def test_import_registers_every_server_of_a_claude_file_with_its_values_sealed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "import", _write(tmp_path, CLAUDE))

    out = capsys.readouterr().out
    assert "added weather" in out and "added remote" in out and "added legacy-sse" in out
    weather, remote, sse = (McpServer.objects.get(name=name) for name in ("weather", "remote", "legacy-sse"))
    assert (weather.transport, weather.command, weather.args) == (
        "stdio",
        sys.executable,
        ["-m", "servers.demo_server"],
    )
    assert (remote.transport, remote.url, sse.transport) == ("http", "https://mcp.example.com/mcp", "sse")
    assert is_sealed(weather.env["WEATHER_API_KEY"]) and unseal(weather.env["WEATHER_API_KEY"]) == API_KEY
    assert is_sealed(weather.env["REGION"])  # every value: a host keeps keys under any name
    assert weather.env["HOME_REF"] == "${HOME}"  # a reference stays one, resolved at connect
    assert is_sealed(remote.headers["Authorization"]) and unseal(remote.headers["Authorization"]) == TOKEN
    assert AuditEvent.objects.filter(action=AuditEvent.Action.SERVER_CREATED).count() == 3
    # And the imported stdio server works as registered.
    call_command("server", "tools", "weather")
    assert Operation.objects.get(kind=Operation.Kind.TOOLS_LIST).status == Operation.Status.OK


def test_export_holds_no_secret_and_round_trips_through_import(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    call_command("server", "import", _write(tmp_path, CLAUDE))
    capsys.readouterr()

    call_command("server", "export", "weather", "remote")
    text = capsys.readouterr().out
    exported = json.loads(text)
    assert API_KEY not in text and "ghp_" not in text and "sealed" not in text.lower()
    assert exported["mcpServers"]["weather"]["env"]["WEATHER_API_KEY"] == "${WEATHER_WEATHER_API_KEY}"
    assert exported["mcpServers"]["weather"]["env"]["HOME_REF"] == "${HOME}"
    assert exported["mcpServers"]["remote"] == {
        "type": "http",
        "url": "https://mcp.example.com/mcp",
        "headers": {"Authorization": "${REMOTE_AUTHORIZATION}"},
    }
    assert set(exported["mcpServers"]) == {"weather", "remote"}

    call_command("server", "export", "--format", "vscode")
    vscode = json.loads(capsys.readouterr().out)
    assert vscode["servers"]["weather"]["type"] == "stdio"
    assert vscode["servers"]["remote"]["headers"]["Authorization"] == "${input:REMOTE_AUTHORIZATION}"
    assert {
        "type": "promptString",
        "id": "REMOTE_AUTHORIZATION",
        "description": "remote: Authorization",
        "password": True,
    } in vscode["inputs"]

    McpServer.objects.all().delete()
    call_command("server", "import", _write(tmp_path, text, "again.json"))
    assert McpServer.objects.get(name="remote").headers["Authorization"] == "${REMOTE_AUTHORIZATION}"


def test_a_vscode_file_imports_and_its_variables_become_environment_references(tmp_path: Path) -> None:
    document = json.loads(json.dumps(VSCODE))
    document["servers"]["docs"]["headers"]["X-Region"] = "${env:DOCS_REGION}"
    call_command("server", "import", _write(tmp_path, document))
    assert McpServer.objects.get(name="docs").headers == {"X-Key": "${KEY}", "X-Region": "${DOCS_REGION}"}


@pytest.mark.parametrize(
    ("document", "reason"),
    [
        ("{not json", "not JSON"),
        ([1, 2], "not a JSON object"),
        ({"other": {}}, "no 'mcpServers'"),
        ({"mcpServers": {"bad name!": {"command": "x"}}}, "'bad name!'"),
        ({"mcpServers": {"ok": {"command": "x"}, "both": {"command": "x", "url": "https://a"}}}, "'both'"),
        ({"mcpServers": {"n": {"url": "https://a", "type": "carrier-pigeon"}}}, "carrier-pigeon"),
        ({"mcpServers": {"n": {"command": "x", "env": {"K": 1}}}}, "'env' must be an object of strings"),
        ({"mcpServers": {"n": {"url": "not a url"}}}, "'n'"),
        ("[" * 100_000 + "]" * 100_000, "not JSON"),
    ],
)
def test_a_bad_file_imports_nothing_and_names_the_entry_and_reason(
    tmp_path: Path, document: object, reason: str
) -> None:
    with pytest.raises(CommandError, match="nothing imported") as refused:
        call_command("server", "import", _write(tmp_path, document))
    assert reason in str(refused.value)
    assert not McpServer.objects.exists()


def test_a_taken_name_refuses_the_whole_file_unless_replace(tmp_path: Path) -> None:
    call_command("server", "add", "remote", "--url", "https://before.example.com/mcp")
    with pytest.raises(CommandError, match="already registered: remote"):
        call_command("server", "import", _write(tmp_path, CLAUDE))
    assert set(McpServer.objects.values_list("name", flat=True)) == {"remote"}

    call_command("server", "import", _write(tmp_path, CLAUDE), "--replace")
    assert McpServer.objects.get(name="remote").url == "https://mcp.example.com/mcp"
    assert McpServer.objects.count() == 3


def test_an_oversized_file_is_refused_before_it_is_read_whole(tmp_path: Path) -> None:
    path = tmp_path / "huge.json"
    path.write_text('{"mcpServers": {}, "pad": "' + "x" * 2_000_000 + '"}')
    with pytest.raises(CommandError, match="at most 1,000,000"):
        call_command("server", "import", str(path))


def test_the_page_imports_for_staff_only_and_exports_without_secrets(alice: User, bob: User) -> None:
    staff, other = Client(), Client()
    staff.force_login(alice)
    other.force_login(bob)

    page = staff.get("/servers/").content.decode()
    assert 'id="import-config"' in page and 'id="export-vscode"' in page
    assert 'id="import-config"' not in other.get("/servers/").content.decode()
    assert other.post("/servers/import", {"config": json.dumps(CLAUDE)}).status_code == 403
    assert not McpServer.objects.exists()

    response = staff.post("/servers/import", {"config": json.dumps(CLAUDE)}, follow=True)
    assert "Imported 3 server(s)" in response.content.decode()
    refused = staff.post("/servers/import", {"config": json.dumps(CLAUDE)}, follow=True).content.decode()
    assert "Nothing imported" in refused and "already registered" in refused

    exported = other.get("/servers/export.json?format=vscode")
    assert exported.status_code == 200 and exported["Content-Disposition"].endswith('"mcp.json"')
    text = exported.content.decode()
    assert (
        API_KEY not in text
        and "ghp_" not in text
        and set(json.loads(text)["servers"])
        == {
            "weather",
            "remote",
            "legacy-sse",
        }
    )
