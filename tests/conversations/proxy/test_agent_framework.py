"""A real third-party agent framework as the host, through both proxies at once: the OpenAI Agents
SDK (``openai-agents``) runs an agent whose model client points at the LLM proxy (upstream: the
app's own demo model) and whose MCP servers are reached through the stdio proxy (mcp-server-time,
wrapped by ``manage.py proxy stdio``) and the HTTP proxy (server-everything over streamable
HTTP). The stored record is one conversation for the session; each model call a step with its
exchange, byte for byte what the host sent and received; each tool call the model asked for
linked to the ``tools/call`` that ran it; the page shows the links to the key's owner and is a
404 to anyone else."""

from __future__ import annotations

import asyncio
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx2
import pytest
from agents import Agent, OpenAIChatCompletionsModel, Runner, set_tracing_disabled
from agents.mcp import MCPServerStdio, MCPServerStreamableHttp, MCPToolMetaContext
from asgiref.sync import sync_to_async
from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import connections
from django.test import Client
from django.urls import reverse
from openai import AsyncOpenAI

from conversations.loop.wire import CALL_ID_META_KEY
from conversations.models import Exchange, Step
from conversations.proxy.keys import create_key
from conversations.proxy.models import ProxyKey, ProxySession
from conversations.record.transcripts.document import transcript_document
from conversations.record.verification import conversation_verify
from servers.models import McpServer
from tests.conversations.proxy.llm_fakes import ServedApp
from tests.servers.proxy.http_harness import everything
from tests.servers.proxy.support import proxy_command, proxy_env
from tests.support import wait_until

pytestmark = [pytest.mark.django_db(transaction=True), pytest.mark.slow]
SESSION = "agents-sdk"
TIME_SERVER = (sys.executable, "-m", "mcp_server_time", "--local-timezone", "UTC")


class Tee(httpx2.AsyncBaseTransport):
    """The host's own HTTP transport, keeping each request body it sent and each response body it
    received, as bytes on its side of the proxy."""

    def __init__(self) -> None:
        self.inner = httpx2.AsyncHTTPTransport()
        self.exchanges: list[tuple[bytes, bytes]] = []

    async def handle_async_request(self, request: httpx2.Request) -> httpx2.Response:
        sent = await request.aread()
        response = await self.inner.handle_async_request(request)
        received = await response.aread()
        self.exchanges.append((sent, received))
        return httpx2.Response(
            response.status_code, headers=response.headers, content=received, request=request
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def app() -> Iterator[str]:
    with ServedApp() as served:
        yield served.url


def _call_id_meta(context: MCPToolMetaContext) -> dict[str, Any]:
    """The model's call id in the ``tools/call``'s ``_meta``, under the key docs/proxy.md names
    (the framework's hook for a tool call's ``_meta``; its tool context knows the call id)."""
    return {CALL_ID_META_KEY: getattr(context.run_context, "tool_call_id", None)}


async def _run_agent(
    app: str,
    raw: str,
    var_dir: Path,
    tee: Tee,
    questions: list[str],
    *,
    meta: bool,
    between: Callable[[int], None],
) -> list[str]:
    set_tracing_disabled(True)  # no traces sent anywhere
    client = AsyncOpenAI(
        base_url=f"{app}/proxy/{raw}/openai/v1",
        api_key=settings.DEMO_MODEL_API_KEY,
        default_headers={"X-Inspector-Session": SESSION},
        max_retries=0,
        http_client=httpx2.AsyncClient(transport=tee, timeout=60),
    )
    command = proxy_command(raw, "time", *TIME_SERVER, session=SESSION)
    time_server = MCPServerStdio(
        params={"command": command[0], "args": command[1:], "env": proxy_env(var_dir)},
        name="time",
        client_session_timeout_seconds=60,
        tool_meta_resolver=_call_id_meta if meta else None,
    )
    http_server = MCPServerStreamableHttp(
        params={"url": f"{app}/proxy/{raw}/mcp/everything", "headers": {"X-Inspector-Session": SESSION}},
        name="everything",
        client_session_timeout_seconds=60,
        tool_meta_resolver=_call_id_meta if meta else None,
    )
    answers = []
    async with time_server, http_server:
        agent = Agent(
            name="host",
            instructions="Use the tools to answer.",
            model=OpenAIChatCompletionsModel(model="demo", openai_client=client),
            mcp_servers=[time_server, http_server],
        )
        for asked, question in enumerate(questions):
            if asked:
                await sync_to_async(between, thread_sensitive=False)(asked)
            result = await Runner.run(agent, question)
            answers.append(str(result.final_output))
    return answers


def _model_calls(key: ProxyKey) -> int:
    return Exchange.objects.filter(turn__conversation__proxy_session__key=key, channel="llm").count()


def _tool_calls(key: ProxyKey) -> list[Exchange]:
    return list(
        Exchange.objects.filter(
            turn__conversation__proxy_session__key=key, label="tools/call", direction="client"
        )
        .exclude(response_body="")
        .select_related("step")
    )


@pytest.mark.parametrize(
    ("meta", "linked_by"), [(False, "arguments"), (True, "call_id")], ids=["as-it-comes", "call-id-in-meta"]
)
def test_an_agents_sdk_host_through_both_proxies_leaves_one_linked_conversation(
    app: str, tmp_path: Path, meta: bool, linked_by: str
) -> None:
    alice = get_user_model().objects.create_user("alice", password="pw")
    key, raw = create_key(alice, name="agents", openai_upstream=f"{app}/demo-model/v1")
    tee = Tee()

    def recorded(runs: int) -> None:
        # The user reads an answer before asking the next question: by then the run's records
        # are stored. (Records of calls made back to back can be stored out of order, and a
        # turn is chosen by the order of storing: test_sessions_order.py.)
        try:
            assert wait_until(lambda: len(_tool_calls(key)) == runs, 60)
            assert wait_until(lambda: _model_calls(key) == len(tee.exchanges), 60)
        finally:
            connections.close_all()

    with everything("streamableHttp") as upstream:
        McpServer.objects.create(name="everything", transport="http", url=f"{upstream}/mcp", enabled=True)
        answers = asyncio.run(
            _run_agent(
                app,
                raw,
                tmp_path / "var",
                tee,
                ["What time is it in Tokyo?", 'Echo "hello both proxies"'],
                meta=meta,
                between=recorded,
            )
        )
    assert all(answers), answers
    # Each run: a call that asks for the tool, then one that carries its result back.
    assert wait_until(lambda: len(_tool_calls(key)) == 2, 60)
    assert wait_until(lambda: _model_calls(key) == len(tee.exchanges), 60)

    [session] = ProxySession.objects.filter(key=key)
    assert session.hint == SESSION
    conversation = session.conversation
    model_calls = list(
        Exchange.objects.filter(conversation=conversation, channel="llm")
        .select_related("step")
        .order_by("pk")
    )
    assert len(model_calls) == len(tee.exchanges) >= 4
    # Byte for byte: what the host sent is what was recorded (and forwarded), and what it got
    # (records are written by a pool of threads: compared as a set, not in order).
    recorded = sorted((row.request_body.encode(), row.response_body.encode()) for row in model_calls)
    assert recorded == sorted(tee.exchanges)
    for row in model_calls:
        assert row.step is not None and row.step.kind == "decide", row.step and row.step.error

    document = transcript_document(conversation=conversation)
    executed = {row.pk: row for row in _tool_calls(key)}
    linked = [
        call
        for turn in document["turns"]
        for step in turn["steps"]
        if step["kind"] == "decide"
        for call in step["calls"]  # type: ignore[union-attr]
    ]
    assert [call["name"] for call in linked] == ["get_current_time", "echo"]  # type: ignore[index]
    for call in linked:
        assert call["executed_exchange"] in executed, call  # type: ignore[index]
        assert call["linked_by"] == linked_by, call  # type: ignore[index]
    servers = {executed[call["executed_exchange"]].step.server_name for call in linked}  # type: ignore[index,union-attr]
    assert servers == {"time", "everything"}
    tool_steps = Step.objects.filter(turn__conversation=conversation, kind="tool")
    assert all(step.parent_id is not None for step in tool_steps)
    assert conversation_verify(conversation=conversation).intact

    owner = Client()
    owner.force_login(alice)
    assert owner.get(f"/c/{conversation.public_id}/").status_code == 200
    # Each turn as the page shows it (an earlier turn is folded and loaded on request).
    turns = {}
    for turn in conversation.turns.order_by("seq"):
        shown = owner.get(reverse("inspector-turn", args=[conversation.public_id, turn.pk]))
        assert shown.status_code == 200
        turns[turn.question] = shown.content.decode()
    assert set(turns) == {"What time is it in Tokyo?", 'Echo "hello both proxies"'}
    for question, html in turns.items():
        how = "its call id in _meta" if meta else "tool name and equal arguments"
        assert html.count(f"ran — linked by {how}") == 1, question
    assert "Asia/Tokyo" in turns["What time is it in Tokyo?"]
    assert "hello both proxies" in turns['Echo "hello both proxies"']
    bob = get_user_model().objects.create_user("bob", password="pw")
    stranger = Client()
    stranger.force_login(bob)
    assert stranger.get(f"/c/{conversation.public_id}/").status_code == 404
    assert stranger.get(f"/api/conversations/{conversation.public_id}").status_code == 404
