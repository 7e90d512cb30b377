"""The README's proxy section, followed literally: its ``proxy key create`` line run as written (the
key is its output's last line), its host configuration snippet run as a host runs it (the official
``mcp`` SDK's stdio client starting the snippet's command), its OpenAI snippet as the host's model
client, a tool call made as a host makes one — and the rows appear live on the conversation's
websocket, the model's call linked to the ``tools/call`` that ran it.

The placeholders are filled as a newcomer fills them: ``/path/to`` is this checkout, ``KEY`` the
key, ``API_KEY`` the demo model's key, ``127.0.0.1:8000`` where this test serves the app. The
snippet's server, ``uvx mcp-server-time``, is run as ``python -m mcp_server_time`` when ``uvx``
is not installed (the same server, installed by the dev extra). Live rows from ``proxy stdio``,
a process of its own, need the scaled deployment's channel layer (Redis): the PostgreSQL pass."""

from __future__ import annotations

import asyncio
import json
import re
import shutil
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import openai
import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.conf import settings
from django.contrib.auth import get_user_model
from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client

from conversations.proxy.models import ProxySession
from inspector.routing import websocket_urlpatterns
from tests.conversations.proxy.llm_fakes import ServedApp
from tests.servers.proxy.support import proxy_env
from tests.support import wait_until
from tests.test_readme_examples import README, ROOT, argv, manage_lines

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.postgres,
    pytest.mark.usefixtures("async_db_connections"),
]
README_HOST = "127.0.0.1:8000"


def _section() -> str:
    text = README.read_text(encoding="utf-8")
    start = text.index("### 4. Record your own host: the proxies")
    return text[start : text.index("\n## ", start)]


def _block(section: str, language: str, containing: str) -> str:
    for block in re.findall(rf"```{language}\n(.*?)```", section, re.DOTALL):
        if containing in block:
            return textwrap.dedent(str(block))
    raise AssertionError(f"the README's proxy section shows no {language} block with {containing!r}")


def test_the_readmes_proxy_section_shows_a_key_command_a_host_snippet_and_a_base_url() -> None:
    section = _section()
    [line] = [line for line in manage_lines(section) if " proxy key create " in line]
    assert "--user admin" in line  # the user `make run` creates
    config = json.loads(_block(section, "json", '"proxy"'))
    assert config["mcpServers"]["time"]["args"][1:3] == ["proxy", "stdio"]
    assert "/proxy/KEY/openai/v1" in _block(section, "python", "OpenAI(")


@pytest.fixture
def app() -> Iterator[str]:
    with ServedApp() as served:
        yield served.url


def _key_from_the_readme(app: str, env: dict[str, str]) -> str:
    [line] = [line for line in manage_lines(_section()) if " proxy key create " in line]
    words = [word.replace(README_HOST, app.removeprefix("http://")) for word in argv(line)]
    done = subprocess.run(words, cwd=ROOT, env=env, capture_output=True, text=True, timeout=120, check=False)
    assert done.returncode == 0, done.stderr
    return done.stdout.strip().splitlines()[-1]


def _host_command(key: str) -> list[str]:
    snippet = _block(_section(), "json", '"proxy"')
    interpreter = argv(".venv/bin/python manage.py")[0]
    interpreter = interpreter if Path(interpreter).is_absolute() else str(ROOT / interpreter)
    snippet = snippet.replace("/path/to/.venv/bin/python", interpreter)
    snippet = snippet.replace("/path/to/manage.py", str(ROOT / "manage.py")).replace('"KEY"', json.dumps(key))
    server = json.loads(snippet)["mcpServers"]["time"]
    command = [server["command"], *server["args"]]
    if command[-2:] == ["uvx", "mcp-server-time"] and shutil.which("uvx") is None:
        command[-2:] = [sys.executable, "-m", "mcp_server_time"]
    return command


def _model_client(app: str, key: str) -> Any:
    snippet = _block(_section(), "python", "OpenAI(")
    snippet = snippet.replace(README_HOST, app.removeprefix("http://")).replace("/KEY/", f"/{key}/")
    found: dict[str, Any] = {"OpenAI": openai.OpenAI, "API_KEY": settings.DEMO_MODEL_API_KEY}
    exec(snippet, found)  # the README's line, as a newcomer pastes it
    return found["client"]


async def _rows_until(socket: WebsocketCommunicator, wanted: str, seen: list[str]) -> None:
    """Rows sent live until one holds ``wanted`` (each row's HTML kept in ``seen``)."""
    while not any(wanted in html for html in seen):
        message = await socket.receive_json_from(timeout=30)
        if message.get("type") == "row":
            seen.append(str(message.get("html", "")))


async def test_a_newcomer_following_the_readme_sees_the_hosts_tool_call_live_and_linked(
    app: str, tmp_path: Path
) -> None:
    await get_user_model().objects.acreate(username="admin", is_staff=True, is_superuser=True)
    env = proxy_env(tmp_path / "var", REDIS_URL=str(settings.REDIS_URL))
    key = await asyncio.to_thread(_key_from_the_readme, app, env)
    client = _model_client(app, key)
    command = _host_command(key)
    params = StdioServerParameters(command=command[0], args=command[1:], env=env)

    async with stdio_client(params) as (read, write), ClientSession(read, write) as mcp:
        await mcp.initialize()
        listed = await mcp.list_tools()
        sessions = ProxySession.objects.filter(key__user__username="admin")
        assert await sync_to_async(wait_until)(sessions.exists, 30)
        session = await sync_to_async(lambda: sessions.get().conversation)()
        admin = await get_user_model().objects.aget(username="admin")
        socket = WebsocketCommunicator(
            URLRouter(websocket_urlpatterns), f"/ws/conversations/{session.public_id}/"
        )
        socket.scope["user"] = admin
        assert (await socket.connect())[0]
        seen: list[str] = []

        tools = [
            {
                "type": "function",
                "function": {
                    "name": t.name,
                    "description": t.description or "",
                    "parameters": t.input_schema,
                },
            }
            for t in listed.tools
        ]
        messages: list[Any] = [{"role": "user", "content": "What time is it in Tokyo?"}]
        reply = await asyncio.to_thread(
            client.chat.completions.create, model="demo", messages=messages, tools=tools
        )
        [call] = reply.choices[0].message.tool_calls
        await _rows_until(socket, "get_current_time", seen)
        result = await mcp.call_tool(call.function.name, json.loads(call.function.arguments))
        text = result.content[0].text  # type: ignore[union-attr]
        await _rows_until(socket, "ran — linked by tool name and equal arguments", seen)
        messages += [
            reply.choices[0].message.model_dump(exclude_none=True),
            {"role": "tool", "tool_call_id": call.id, "content": text},
        ]
        final = await asyncio.to_thread(client.chat.completions.create, model="demo", messages=messages)
        assert final.choices[0].message.content
        await socket.disconnect()

    assert call.function.name == "get_current_time" and "Asia/Tokyo" in call.function.arguments
    assert any("Asia/Tokyo" in html for html in seen)
