"""Requests and arguments no database column holds as they are: a NUL (``%00``) in a path, a
query or a cookie, a page number past any integer column, a NUL inside a tool's arguments. Each
gets a clear answer, never a server error (PostgreSQL refuses NUL in text and ``\\u0000`` in
``jsonb``, and ``LIMIT`` past a bigint; SQLite takes them, so the PostgreSQL pass shows it)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client

from servers import selectors, services
from servers.models import Operation

pytestmark = pytest.mark.django_db

NUL_ADDRESSES = [
    ("get", "/servers/demo/transcript?method=%00"),
    ("get", "/servers/demo/transcript.json?method=%00"),
    ("get", "/servers/%00/"),
    ("get", "/servers/demo%00/transcript"),
    ("post", "/proxy-keys/%00/revoke"),
    ("get", "/api/conversations?q=%00"),
    ("get", "/?q=%00"),
    ("get", "/?%00=1"),
]


@pytest.mark.parametrize(("method", "address"), NUL_ADDRESSES)
def test_a_nul_in_an_address_is_refused_plainly(
    client: Client, workbench: None, bob: User, method: str, address: str
) -> None:
    services.demo_server_ensure()
    client.force_login(bob)

    response = getattr(client, method)(address)

    assert response.status_code == 400, response.content[:300]
    assert b"NUL" in response.content


@pytest.mark.parametrize("cookie", ["sessionid", "csrftoken"])
def test_a_nul_in_a_cookie_is_refused_plainly(client: Client, cookie: str) -> None:
    client.cookies[cookie] = "abcdefghijk\x00lmnop"

    response = client.get("/accounts/login/")

    assert response.status_code == 400
    assert b"NUL" in response.content


def test_a_page_number_past_any_integer_is_the_last_page(client: Client, bob: User) -> None:
    client.force_login(bob)

    response = client.get("/?page=99999999999999999999999")

    assert response.status_code == 200


def test_a_nul_inside_a_tools_arguments_is_sent_as_typed_and_stored_escaped(
    client: Client, workbench: None, bob: User
) -> None:
    server = services.demo_server_ensure()
    client.force_login(bob)
    client.post(f"/servers/{server.name}/list/tools")

    response = client.post(
        f"/servers/{server.name}/tools/calculate", {"arguments": json.dumps({"expression": "1\u0000"})}
    )

    assert response.status_code == 302, response.content[:500]
    operation = Operation.objects.get(kind="tools/call")
    sent = next(e for e in selectors.operation_exchanges(operation=operation) if e.label == "tools/call")
    assert json.loads(sent.request_body)["params"]["arguments"] == {"expression": "1\u0000"}
    assert "\u0000" not in json.dumps(operation.arguments, ensure_ascii=False)
    assert client.get(response["Location"]).status_code == 200
