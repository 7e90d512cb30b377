"""A tool call sends only ``tools/call``: neither an agent turn nor ``manage.py server call`` lets the
MCP SDK send its own ``tools/list`` to check the result's ``structuredContent``. Real runs: the demo
model in-process, the demo MCP server over stdio (its calculator declares an outputSchema)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command

from conversations.loop.llm import ToolDef
from conversations.models import Exchange
from conversations.redaction import redactor
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from servers import gateway
from servers.models import Operation
from servers.services import demo_server_ensure
from servers.toolhost import GatewayToolHost

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
def _close_sessions() -> Iterator[None]:
    gateway.close_all()
    yield
    gateway.close_all()


def _mcp_labels(**where: object) -> list[str]:
    return list(
        Exchange.objects.filter(channel="mcp", **where)
        .exclude(label="stderr")
        .order_by("started_at", "id")
        .values_list("label", flat=True)
    )


def test_an_agent_turn_lists_the_tools_once_and_then_only_calls() -> None:
    _, turn = conversation_start(
        owner=User.objects.create_user("alice"),
        model_profile=demo_profile_ensure(),
        question="What is (3 + 4) * 2 ** 3?",
        servers=[demo_server_ensure()],
        paradigm="native",
        dispatch=False,
    )
    turn_run(turn_id=turn.pk)
    turn.refresh_from_db()
    assert turn.status == "done", turn.error

    labels = _mcp_labels(turn=turn)
    assert "tools/call" in labels
    assert labels.count("tools/list") == 1, labels
    assert labels.index("tools/list") < labels.index("tools/call")


def test_an_agent_call_on_a_session_that_never_listed_the_tool_sends_no_tools_list() -> None:
    """A session opened for the call itself (the listing's session died, another process)."""
    config = demo_server_ensure().to_config()
    outcome = gateway.call_tool(config, "calculate", {"expression": "6 * 7"})

    assert outcome.error == ""
    assert outcome.result is not None and outcome.result.get("structuredContent") is not None
    labels = [record.label for record in outcome.records if record.label != "stderr"]
    assert labels == ["initialize", "notifications/initialized", "tools/call"]
    assert [record.label for record in outcome.unclaimed] == []


def test_server_call_sends_only_tools_call_after_connecting(workbench: None) -> None:
    demo_server_ensure()
    call_command("server", "call", "demo", "calculate", "--args", '{"expression": "6 * 7"}')

    operation = Operation.objects.get(kind=Operation.Kind.TOOLS_CALL)
    labels = [e.label for e in operation.exchanges.order_by("seq") if e.label != "stderr"]
    assert labels == ["initialize", "notifications/initialized", "tools/call"]
    assert _mcp_labels(label="tools/list") == []


def test_an_agent_result_that_breaks_the_listed_output_schema_is_an_error_with_the_result_kept() -> None:
    server = demo_server_ensure()
    host = GatewayToolHost({server.pk: server.to_config()}, redactor())
    listed = ToolDef(
        server_id=server.pk,
        server_name=server.name,
        name="calculate",
        provider_name="demo__calculate",
        description="",
        input_schema={"type": "object"},
        # What the model was shown: a field the real result does not carry.
        output_schema={"type": "object", "required": ["answer"]},
    )

    run = host.call(listed, {"expression": "6 * 7"})

    assert run.error.startswith("the result does not match the tool's outputSchema: (root): 'answer'")
    assert run.result is not None and "structuredContent" in run.result
    assert [r.label for r in run.exchanges if r.label != "stderr"][-1] == "tools/call"
    assert "tools/list" not in [r.label for r in run.exchanges]
