"""An operation's transcript in wire order: by the time each message was sent or received (the
capture's own time), not by the order the messages were recorded in. Over streamable HTTP a
notification is recorded only once its HTTP response arrives: against a server that answers
``notifications/initialized`` late, ``tools/list`` sent after it is recorded before it."""

from __future__ import annotations

import json
import re
from datetime import UTC, timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.test import Client

from servers import gateway, selectors
from servers.models import McpServer, Operation
from servers.services import operation_start
from tests.servers.late_answers_server import late_answers
from tests.servers.test_gateway_http import demo_http_url as demo_http_url  # noqa: F401 — the fixture

pytestmark = [pytest.mark.django_db(transaction=True)]


# How long the server holds its 202 to ``notifications/initialized``: longer than the client
# takes to send ``tools/list`` and have it answered.
NOTIFICATION_LATE = 0.3


def test_an_operations_messages_are_shown_in_wire_order_with_the_recording_order_where_it_differs(
    workbench: None,
    alice: User,
    client: Client,
) -> None:
    with late_answers(notification_late=NOTIFICATION_LATE) as late:
        call_command("server", "add", "late-answers", "--url", late.url)
        server = McpServer.objects.get(name="late-answers")
        try:
            operation = operation_start(server=server, user=alice, kind=Operation.Kind.TOOLS_LIST)
        finally:
            gateway.close_all()
    assert operation.status == Operation.Status.OK, operation.error

    shown = selectors.operation_exchanges(operation=operation)
    labels = [exchange.label for exchange in shown]

    assert labels.index("initialize") < labels.index("notifications/initialized") < labels.index("tools/list")
    assert [exchange.started_at for exchange in shown] == sorted(exchange.started_at for exchange in shown)
    # Where the recording order differs from the wire order, the page says where it was recorded.
    client.force_login(alice)
    page = client.get(f"/servers/op/{operation.public_id}/").content.decode()
    for place, exchange in enumerate(shown, 1):
        article = re.search(rf'<article[^>]* id="msg-{exchange.pk}".*?</header>', page, re.S)
        assert article is not None
        marked = f"recorded #{exchange.seq}" in article.group(0)
        assert marked == (exchange.seq != place), (exchange.label, exchange.seq, place)
        if marked:  # with the time it was recorded: once complete, its start plus its duration
            recorded_at = exchange.started_at + timedelta(milliseconds=exchange.duration_ms or 0)
            assert (
                f'datetime="{recorded_at.astimezone(UTC).isoformat(timespec="microseconds")}"'
                in article.group(0)
            )
    # The recording order really differed here (else this test shows nothing): the
    # notification's record waited for its HTTP response.
    assert sorted(shown, key=lambda exchange: exchange.seq) != shown


def test_the_command_lines_json_lists_an_operations_messages_in_wire_order(
    demo_http_url: str,  # noqa: F811
    workbench: None,
    capsys: pytest.CaptureFixture[str],
) -> None:
    call_command("server", "add", "http-demo", "--url", demo_http_url)
    capsys.readouterr()
    call_command("server", "call", "http-demo", "calculate", "--args", '{"expression": "1 + 1"}', "--json")
    exported = json.loads(capsys.readouterr().out)["exchanges"]

    labels = [message["label"] for message in exported]
    assert labels.index("initialize") < labels.index("notifications/initialized") < labels.index("tools/call")
    times = [message["started_at"] for message in exported]
    assert times == sorted(times)
    assert sorted(message["seq"] for message in exported) == list(range(1, len(exported) + 1))
