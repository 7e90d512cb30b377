"""A server's kept log level is sent on each new session without the SDK's deprecation warning:
the gateway sends ``logging/setLevel`` as a plain request (the protocol's older revisions define
it, and servers of those revisions are the ones that advertise logging) rather than through the
SDK's deprecated ``set_logging_level`` helpers, which warned twice on every later command."""

from __future__ import annotations

import json
import sys
import warnings
from pathlib import Path

import pytest
from django.core.management import call_command
from mcp.shared.exceptions import MCPDeprecationWarning

from servers import gateway, selectors
from servers.models import Operation

FASTMCP = str(Path(__file__).with_name("fastmcp_server.py"))
pytestmark = [pytest.mark.django_db(transaction=True)]


def test_commands_after_a_log_level_was_set_warn_of_nothing(workbench: None) -> None:
    call_command("server", "add", "fast", "--", sys.executable, FASTMCP)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        call_command("server", "log-level", "fast", "warning")
        gateway.close_all()  # the next command is a new process: a new session, told the level
        call_command("server", "tools", "fast")

    assert [str(w.message) for w in caught if issubclass(w.category, MCPDeprecationWarning)] == []
    listing = Operation.objects.get(kind="tools/list")
    sent = [e for e in selectors.operation_exchanges(operation=listing) if e.label == "logging/setLevel"]
    assert len(sent) == 1 and json.loads(sent[0].request_body)["params"] == {"level": "warning"}
