"""Resource subscriptions against real servers: ``manage.py server subscribe`` against
server-everything records ``resources/subscribe``, each ``notifications/resources/updated`` as it
arrives and ``resources/unsubscribe``; the workbench ends a subscription when the user
unsubscribes; a server that does not advertise ``resources.subscribe`` is not sent the request,
and the page and the command say why."""

from __future__ import annotations

import io
import sys
from collections.abc import Iterator
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import Client

from servers import gateway, selectors
from servers.gateway.capabilities import refusal, unavailable
from servers.models import McpServer, Operation
from tests.servers.test_capability_gate import LOPSIDED
from tests.servers.test_third_party import node_server, register, wait_for

pytestmark = pytest.mark.django_db(transaction=True)
DOCUMENT = "demo://resource/static/document/architecture.md"
UPDATED = "notifications/resources/updated"


@pytest.fixture
def threaded(settings: Any) -> Iterator[None]:
    """Operations run in the workbench thread pool, as in production (a subscription waits there)."""
    settings.WORKBENCH_RUNNER = "thread"
    yield
    gateway.close_all()


@pytest.fixture
def everything() -> McpServer:
    return register("everything", [*node_server("server-everything"), "stdio"])


def labels(operation: Operation) -> list[tuple[str, str]]:
    return [
        (e.label, e.status) for e in selectors.operation_exchanges(operation=operation) if e.label != "stderr"
    ]


def test_a_subscription_flag_is_read_inside_the_resources_capability() -> None:
    assert unavailable("s", "resources.subscribe", {"resources": {"subscribe": True}}) == ""
    assert (
        unavailable("s", "resources.subscribe", {"resources": {}})
        == "s does not advertise resources.subscribe"
    )
    assert unavailable("s", "resources.subscribe", {"resources": {"subscribe": "yes"}}) != ""
    assert unavailable("s", "resources.subscribe", {}) == "s does not advertise the resources capability"
    assert refusal("s", "resources/unsubscribe", {"resources": []}).endswith(
        "resources/unsubscribe was not sent"
    )


@pytest.mark.slow
def test_server_subscribe_prints_each_update_and_unsubscribes(threaded: None, everything: McpServer) -> None:
    out, err = io.StringIO(), io.StringIO()
    call_command(
        "server",
        "subscribe",
        "everything",
        DOCUMENT,
        "--for",
        "7",
        "--call",
        "toggle-subscriber-updates",
        stdout=out,
        stderr=err,
    )

    subscription = Operation.objects.get(kind=Operation.Kind.RESOURCE_SUBSCRIBE)
    assert subscription.status == "ok", subscription.error
    sent = labels(subscription)
    updates = sent.count((UPDATED, ""))
    # Updates come at once on the toggle, then every 5 s.
    assert updates >= 1 and subscription.result == {"uri": DOCUMENT, "updates": updates}
    assert (
        sent.index(("resources/subscribe", "ok"))
        < sent.index((UPDATED, ""))
        < sent.index(("resources/unsubscribe", "ok"))
    )
    printed = out.getvalue().splitlines()
    assert sum(line.endswith(f" updated {DOCUMENT}") for line in printed) == updates
    assert (
        printed[-1] == f"{updates} update{'s' if updates != 1 else ''} in all; unsubscribed from {DOCUMENT}"
    )
    assert "called toggle-subscriber-updates: ok" in err.getvalue()


@pytest.mark.slow
def test_unsubscribing_in_the_workbench_ends_the_subscription_with_resources_unsubscribe(
    client: Client, threaded: None, everything: McpServer, alice: User
) -> None:
    client.force_login(alice)
    client.post("/servers/everything/list/resources")
    wait_for(lambda: Operation.objects.filter(kind="resources/list", status="ok").exists())
    response = client.post("/servers/everything/subscribe", {"uri": DOCUMENT})
    subscription = Operation.objects.get(kind=Operation.Kind.RESOURCE_SUBSCRIBE)
    assert response.status_code == 302 and str(subscription.public_id) in response["Location"]
    wait_for(lambda: ("resources/subscribe", "ok") in labels(subscription))

    page = client.get("/servers/everything/").content.decode()
    assert f"/servers/op/{subscription.public_id}/cancel" in page and "Unsubscribe" in page

    client.post(f"/servers/op/{subscription.public_id}/cancel")
    wait_for(lambda: Operation.objects.get(pk=subscription.pk).is_finished)
    subscription.refresh_from_db()
    assert subscription.status == "ok", subscription.error
    assert ("resources/unsubscribe", "ok") in labels(subscription)
    page = client.get("/servers/everything/").content.decode()
    assert f"/servers/op/{subscription.public_id}/cancel" not in page


@pytest.mark.slow
def test_a_reconnect_ends_an_open_subscription_with_an_error_saying_so(
    client: Client, threaded: None, everything: McpServer, alice: User
) -> None:
    client.force_login(alice)
    client.post("/servers/everything/subscribe", {"uri": DOCUMENT})
    subscription = Operation.objects.get(kind=Operation.Kind.RESOURCE_SUBSCRIBE)
    wait_for(lambda: ("resources/subscribe", "ok") in labels(subscription))

    client.post("/servers/everything/connect")  # a new session: the old one is closed

    wait_for(lambda: Operation.objects.get(pk=subscription.pk).is_finished)
    subscription.refresh_from_db()
    assert subscription.status == "error"
    assert f"the session closed while subscribed to {DOCUMENT}" in subscription.error
    assert "resources/unsubscribe" not in [label for label, _ in labels(subscription)]


@pytest.fixture
def lopsided() -> McpServer:
    return register("lopsided", [sys.executable, LOPSIDED])


def test_a_server_without_resources_subscribe_is_not_sent_it_and_the_page_says_why(
    client: Client, workbench: None, bob: User, lopsided: McpServer
) -> None:
    client.force_login(bob)
    client.post("/servers/lopsided/connect")
    client.post("/servers/lopsided/list/resources")
    page = client.get("/servers/lopsided/").content.decode()

    reason = "lopsided does not advertise resources.subscribe"
    assert f'disabled title="{reason}">Subscribe</button>' in page
    assert f"{reason}: resources/subscribe is not sent." in page

    client.post("/servers/lopsided/subscribe", {"uri": "memo://insights"})
    subscription = Operation.objects.get(kind=Operation.Kind.RESOURCE_SUBSCRIBE)
    assert subscription.status == "error"
    assert subscription.error == f"{reason}: resources/subscribe was not sent"
    assert "resources/subscribe" not in [label for label, _ in labels(subscription)]

    with pytest.raises(CommandError, match="resources/subscribe was not sent"):
        call_command("server", "subscribe", "lopsided", "memo://insights", "--for", "1")


def test_another_user_cannot_see_or_end_a_subscription(
    client: Client, workbench: None, alice: User, bob: User, lopsided: McpServer
) -> None:
    operation = Operation.objects.create(
        server=lopsided, user=alice, kind=Operation.Kind.RESOURCE_SUBSCRIBE, target="memo://insights"
    )
    client.force_login(bob)
    assert client.get(f"/servers/op/{operation.public_id}/").status_code == 404
    assert client.post(f"/servers/op/{operation.public_id}/cancel").status_code == 404
    operation.refresh_from_db()
    assert not operation.cancel_requested


@pytest.mark.parametrize(
    "uri",
    ["", "demo://" + "x" * 600, "demo://a\x00b"],
    ids=["empty", "longer-than-a-target", "nul"],
)
def test_a_hostile_uri_is_refused_before_anything_is_started(
    client: Client, workbench: None, bob: User, lopsided: McpServer, uri: str
) -> None:
    client.force_login(bob)
    response = client.post("/servers/lopsided/subscribe", {"uri": uri})
    assert response.status_code == 400
    assert b"at most 500 characters" in response.content
    assert not Operation.objects.exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["demo://a", "--for", "0"], "--for must be a positive number"),
        (["demo://a", "--for", "nan"], "--for must be a positive number"),
        (["demo://" + "x" * 600], "1 to 500 characters"),
        (["demo://a", "--call", "t", "--args", "[1]"], "--args must be a JSON object"),
        (["demo://a", "--call", "t", "--args", "{"], "--args is not JSON"),
    ],
)
def test_server_subscribe_refuses_bad_options_without_sending_anything(
    lopsided: McpServer, arguments: list[str], message: str
) -> None:
    with pytest.raises(CommandError, match=message):
        call_command("server", "subscribe", "lopsided", *arguments)
    assert not Operation.objects.exists()
