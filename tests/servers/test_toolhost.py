"""A turn's MCP servers as the servers app gives them to the runner (``conversations.loop.toolhost``);
connecting them over real stdio is held by tests/conversations/test_runner.py."""

from __future__ import annotations

from typing import Any

import pytest

from conversations.loop import toolhost
from conversations.loop.toolhost import turn_servers
from servers.operations import output_check
from servers.toolhost import GatewayServers
from tests.factories import ConversationFactory, McpServerFactory

pytestmark = pytest.mark.django_db


def test_the_servers_app_gives_the_runner_a_conversations_servers_by_name_and_their_secrets(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("H22_TOOLHOST_TOKEN", "toolhost-secret-0042")
    zeta = McpServerFactory(name="zeta", env={"TOKEN": "${H22_TOOLHOST_TOKEN}", "MODE": "plain"})
    alpha = McpServerFactory(name="alpha", enabled=False)
    McpServerFactory(name="other")
    conversation = ConversationFactory(servers=[zeta, alpha])

    servers = turn_servers(conversation)

    assert isinstance(servers, GatewayServers)
    assert [server.name for server in servers.servers] == ["alpha", "zeta"]
    assert servers.enabled == 1
    assert servers.secrets() == ["toolhost-secret-0042"]


def test_without_a_registered_source_the_runner_is_told_the_servers_app_is_missing(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(toolhost, "_source", None)

    with pytest.raises(RuntimeError, match="servers app"):
        turn_servers(ConversationFactory())


@pytest.mark.parametrize("schema", [{"type": 5}, {"$ref": "#/nowhere"}, {"type": "object", "required": 7}])
def test_an_output_schema_that_cannot_be_used_is_reported_not_raised(schema: dict[str, Any]) -> None:
    # A server's schema is untrusted: one no validator can use must not fail the call's step.
    check = output_check({"structuredContent": {"a": 1}}, {"outputSchema": schema})

    assert check["checked"] is False
    assert check["reason"].startswith("the tool's outputSchema cannot be used for validation")
