"""The server page's "As hosts see it" section and the hosts page, as the user who listed the
tools and as a second user, who gets a 404 (docs/hosts.md)."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from servers import services
from servers.models import McpServer, Operation
from servers.services import demo_server_ensure

pytestmark = [pytest.mark.django_db(transaction=True)]


def signed_in(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def listed(user: User) -> McpServer:
    server = demo_server_ensure()
    operation = services.operation_start(server=server, user=user, kind=Operation.Kind.TOOLS_LIST)
    assert operation.status == Operation.Status.OK, operation.error
    return server


def test_the_owner_sees_each_tool_as_each_host_sends_it(workbench: None, alice: User) -> None:
    server = listed(alice)
    client = signed_in(alice)
    page = client.get(reverse("servers-hosts", args=[server.name]))
    detail = client.get(reverse("servers-detail", args=[server.name]))

    assert page.status_code == 200
    text = page.content.decode()
    assert 'id="host-claude"' in text and 'id="host-openai-strict"' in text
    assert "mcp__demo__get_weather_forecast" in text
    assert '<span class="badge verdict-ok" data-host="openai">ok</span>' in text
    assert '<span class="badge verdict-changed" data-host="claude">changed</span>' in text
    assert "<strong>lost</strong>" in text  # strict mode drops minLength
    assert 'id="hosts-all"' in detail.content.decode()


def test_one_host_is_chosen_by_its_key(workbench: None, alice: User) -> None:
    server = listed(alice)
    page = signed_in(alice).get(reverse("servers-hosts", args=[server.name]), {"host": "cursor"})

    text = page.content.decode()
    assert page.status_code == 200
    assert 'id="host-cursor"' in text and 'id="host-claude"' not in text
    missing = signed_in(alice).get(reverse("servers-hosts", args=[server.name]), {"host": "nope"})
    assert missing.status_code == 404


def test_a_second_user_gets_404_and_never_the_owners_tools(workbench: None, alice: User, bob: User) -> None:
    server = listed(alice)
    client = signed_in(bob)
    page = client.get(reverse("servers-hosts", args=[server.name]))
    detail = client.get(reverse("servers-detail", args=[server.name]))

    assert page.status_code == 404
    assert "mcp__demo__" not in page.content.decode()
    assert detail.status_code == 200
    assert 'id="hosts-all"' not in detail.content.decode()
    assert "List the tools first." in detail.content.decode()


def test_a_disabled_server_is_404_for_a_user_without_staff(workbench: None, bob: User) -> None:
    server = listed(bob)
    McpServer.objects.filter(pk=server.pk).update(enabled=False)

    assert signed_in(bob).get(reverse("servers-hosts", args=[server.name])).status_code == 404


def test_what_a_server_lists_is_shown_inert_with_hidden_characters_marked(alice: User) -> None:
    # A listing as a hostile server might send it: a bidi override in a name, markup in a
    # description, a schema no host takes. Stored as the workbench stores a listing.
    server = McpServer.objects.create(name="hostile", transport="http", url="http://127.0.0.1:9/mcp")
    Operation.objects.create(
        server=server,
        user=alice,
        kind=Operation.Kind.TOOLS_LIST,
        status=Operation.Status.OK,
        result=[
            {
                "name": "evil\u202etool",
                "description": "<script>alert(1)</script>",
                "inputSchema": {"type": "object", "properties": {"x": {"type": "array"}}},
            },
            "not a definition",
        ],
    )
    page = signed_in(alice).get(reverse("servers-hosts", args=[server.name]))
    text = page.content.decode()

    assert page.status_code == 200
    assert "<script>alert(1)</script>" not in text and "&lt;script&gt;" in text
    assert "\u202e" not in text and "U+202E" in text
    assert '<span class="badge verdict-refused" data-host="openai">refused</span>' in text
