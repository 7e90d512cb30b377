"""MCP Apps in the workbench against a real stdio server with tool UIs (``tests/servers/app_server.py``):
the resource read, the policy the app is served under, tools called through the host, the
traffic kept in the transcript, and who may do any of it."""

from __future__ import annotations

import base64
import json
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from conversations.models import Exchange
from servers import mcp_apps, selectors, services
from servers.models import McpServer, Operation

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


def app_server() -> McpServer:
    return services.server_save(
        server=None,
        owner=None,
        fields={
            "name": "apps",
            "transport": "stdio",
            "command": sys.executable,
            "args": ["tests/servers/app_server.py"],
            "cwd": str(REPO_ROOT),
            "call_timeout": 10.0,
        },
        env={},
        secret_env={},
        headers={},
        secret_headers={},
    )


def call(client: Client, server: McpServer, tool: str, arguments: dict[str, Any]) -> Operation:
    client.post(f"/servers/{server.name}/list/tools")
    response = client.post(f"/servers/{server.name}/tools/{tool}", {"arguments": json.dumps(arguments)})
    assert response.status_code == 302, response.content[:500]
    return Operation.objects.get(public_id=response["Location"].rstrip("/").rsplit("/", 1)[-1])


def post_json(client: Client, url: str, body: Any) -> Any:
    return client.post(url, json.dumps(body), content_type="application/json")


def test_a_tool_with_a_ui_gets_an_app_panel_and_the_gateway_offers_the_ui_extension(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    operation = call(client, app_server(), "counter", {"start": 7})

    page = client.get(f"/servers/op/{operation.public_id}/").content.decode()

    assert 'id="mcp-app"' in page and "ui://counter/app.html" in page
    data = page.split('<script id="mcp-app-data" type="application/json">')[1].split("</script>")[0]
    assert json.loads(data)["arguments"] == {"start": 7}
    initialize = Exchange.objects.filter(label="initialize").latest("id")
    capabilities = json.loads(initialize.request_body)["params"]["capabilities"]
    assert capabilities["extensions"][mcp_apps.UI_EXTENSION] == {"mimeTypes": [mcp_apps.APP_MIME]}


def test_the_app_is_read_as_a_recorded_resource_and_served_sandboxed_under_the_policy_it_declared(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    operation = call(client, app_server(), "counter", {})

    opened = client.post(f"/servers/op/{operation.public_id}/app").json()
    view = client.get(opened["view"])

    read = Operation.objects.get(kind="resources/read", target="ui://counter/app.html")
    assert read.status == "ok" and read.user == alice
    assert opened["refused"] == ["'unsafe-eval'; x"]
    assert view.status_code == 200 and b"Counter app" in view.content
    policy = view["Content-Security-Policy"]
    assert "default-src 'none'" in policy and "sandbox allow-scripts" in policy
    assert "connect-src https://api.example.com;" in policy and "unsafe-eval" not in policy
    assert "frame-ancestors 'self'" in policy and view["X-Frame-Options"] == "SAMEORIGIN"


def test_an_app_with_no_declared_domains_may_reach_no_network() -> None:
    policy = mcp_apps.csp_header({})

    assert "connect-src 'none'" in policy and "frame-src 'none'" in policy and "base-uri 'none'" in policy
    assert "https:" not in policy and "*" not in policy


def test_a_tool_the_app_calls_through_the_host_runs_as_an_ordinary_call_of_that_server_only(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    operation = call(client, app_server(), "counter", {})
    url = f"/servers/op/{operation.public_id}/app/call"

    answered = post_json(client, url, {"name": "increment", "arguments": {"by": 41}}).json()
    unknown = post_json(client, url, {"name": "get_weather_forecast", "arguments": {}})
    malformed = client.post(url, b"\xff{", content_type="application/json")

    assert answered["result"]["content"][0]["text"] == "counter at 42"
    made = Operation.objects.get(kind="tools/call", target="increment")
    assert (
        made.user == alice
        and made.arguments == {"by": 41}
        and answered["operation"].endswith(f"{made.public_id}/")
    )
    assert "tools/call" in [e.label for e in selectors.operation_exchanges(operation=made)]
    assert unknown.status_code == 400 and "listed no tool" in unknown.json()["error"]
    assert malformed.status_code == 400


def test_app_traffic_is_kept_in_the_transcript_bounded_labelled_and_inert(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    server = app_server()
    operation = call(client, server, "counter", {})
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "ui/initialize",
        "params": {"x": "<script>alert(1)</script>"},
    }
    messages = [
        {"side": "app", "message": json.dumps(initialize)},
        {"side": "host", "message": json.dumps({"jsonrpc": "2.0", "id": 1, "result": {}})},
        {"side": "app", "message": "A" * 200_000},
        {"side": "app", "message": "\ud800\x00 not json"},
        {"side": "nobody", "message": "x"},
        ["not", "an", "object"],
        {"side": "app", "message": {"not": "text"}},
        {
            "side": "app",
            "message": '{"jsonrpc": "2.0", "method": "big", "params": "AAA… cut',
            "method": "big",
        },
        {"side": "app", "message": '{"jsonrpc": "2.0", "method": 42}'},
    ]

    answer = post_json(
        client, f"/servers/op/{operation.public_id}/app/traffic", {"messages": messages}
    ).json()
    page = client.get(f"/servers/{server.name}/transcript?method=app").content.decode()

    assert answer == {"kept": 6, "dropped": 3}
    rows = [e for e in selectors.operation_exchanges(operation=operation) if mcp_apps.is_app_label(e.label)]
    assert [e.label for e in rows] == [
        "app → host ui/initialize",
        "host → app result",
        "app → host not JSON-RPC",
        "app → host not JSON-RPC",
        "app → host big (not kept whole)",
        "app → host not JSON-RPC",
    ]
    assert rows[0].jsonrpc_id == "1" and rows[0].direction == "local"
    assert len(rows[2].request_body) < 70_000 and "cut" in rows[2].request_body
    assert "&lt;script&gt;alert(1)&lt;/script&gt;" in page and "<script>alert(1)" not in page


def test_the_transcript_export_keeps_a_message_whose_json_holds_a_lone_surrogate_as_its_text(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    server = app_server()
    operation = call(client, server, "counter", {})
    text = '{"jsonrpc": "2.0", "method": "bad\\ud800"}'
    post_json(
        client,
        f"/servers/op/{operation.public_id}/app/traffic",
        {"messages": [{"side": "app", "message": text}]},
    )

    response = client.get(f"/servers/{server.name}/transcript.json?method=app")

    assert response.status_code == 200
    [row] = response.json()["messages"]
    assert row["request"] == text


def test_a_flood_of_app_messages_stops_being_kept_at_the_cap(
    client: Client, workbench: None, alice: User, settings: Any, monkeypatch: pytest.MonkeyPatch
) -> None:
    client.force_login(alice)
    operation = call(client, app_server(), "counter", {})
    monkeypatch.setattr(services, "MESSAGES_PER_OPERATION", 5)
    item = {"side": "app", "message": '{"jsonrpc": "2.0", "method": "notifications/message"}'}
    url = f"/servers/op/{operation.public_id}/app/traffic"

    first = post_json(client, url, {"messages": [item] * 4}).json()
    second = post_json(client, url, {"messages": [item] * 4}).json()
    too_many = post_json(client, url, {"messages": [item] * (mcp_apps.BATCH_MESSAGES + 50)}).json()

    assert (first["kept"], second["kept"], too_many["kept"]) == (4, 1, 0)


def test_someone_else_cannot_open_serve_call_through_or_post_traffic_for_an_operation(
    client: Client, workbench: None, alice: User, bob: User
) -> None:
    client.force_login(alice)
    operation = call(client, app_server(), "counter", {})
    opened = client.post(f"/servers/op/{operation.public_id}/app").json()
    client.force_login(bob)
    base = f"/servers/op/{operation.public_id}/app"

    assert client.post(base).status_code == 404
    assert client.get(opened["view"]).status_code == 404
    assert post_json(client, f"{base}/call", {"name": "increment", "arguments": {"by": 1}}).status_code == 404
    item = {"side": "app", "message": "{}"}
    assert post_json(client, f"{base}/traffic", {"messages": [item]}).status_code == 404
    assert Operation.objects.filter(target="increment").count() == 0


def test_a_tool_without_a_ui_has_no_app_endpoints(client: Client, workbench: None, alice: User) -> None:
    client.force_login(alice)
    operation = call(client, app_server(), "increment", {"by": 1})

    assert 'id="mcp-app"' not in client.get(f"/servers/op/{operation.public_id}/").content.decode()
    assert client.post(f"/servers/op/{operation.public_id}/app").status_code == 404


def test_the_ui_resource_is_found_under_either_key_and_in_a_base64_blob() -> None:
    assert mcp_apps.ui_resource_uri({"_meta": {"ui": {"resourceUri": "ui://a/b"}}}) == "ui://a/b"
    assert mcp_apps.ui_resource_uri({"_meta": {"ui/resourceUri": "ui://c"}}) == "ui://c"
    assert mcp_apps.ui_resource_uri({"_meta": {"ui": {"resourceUri": "https://x"}}}) == ""
    assert mcp_apps.ui_resource_uri({"_meta": "nope"}) == ""
    blob = base64.b64encode("<p>é</p>".encode()).decode()
    result = {
        "contents": [{"uri": "ui://c", "mimeType": mcp_apps.APP_MIME, "blob": blob, "_meta": {"ui": 5}}]
    }
    assert mcp_apps.app_resource(result, uri="ui://c").html == "<p>é</p>"
    with pytest.raises(mcp_apps.AppResourceError, match="text/plain"):
        mcp_apps.app_resource({"contents": [{"mimeType": "text/plain", "text": "x"}]}, uri="ui://c")
    with pytest.raises(mcp_apps.AppResourceError):
        mcp_apps.app_resource({"contents": [{"mimeType": "text/html", "blob": "!!"}]}, uri="ui://c")


def test_recorded_calls_pair_each_app_call_with_the_hosts_answer_and_survive_hostile_records() -> None:
    call = (
        '{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{"name":"increment","arguments":{"by":41}}}'
    )
    answer = '{"jsonrpc":"2.0","id":1,"result":{"content":[{"type":"text","text":"counter at 42"}]}}'
    refused = '{"jsonrpc":"2.0","id":2,"error":{"code":-32603,"message":"apps listed no tool named \'x\'"}}'
    rows = [
        ("app → host tools/call", "1", call, ""),
        ("host → app result", "1", "", answer),
        ("app → host tools/call", "2", call.replace('"id":1', '"id":2').replace("increment", "x"), ""),
        ("host → app error", "2", "", refused),
        # Hostile or broken: not JSON, params not an object, an answer to nothing, never answered.
        ("app → host tools/call", "3", "{not json", ""),
        ("app → host tools/call", "4", '{"jsonrpc":"2.0","id":4,"method":"tools/call","params":"nope"}', ""),
        ("host → app result", "9", "", answer),
        ("app → host tools/call", "5", call.replace('"id":1', '"id":5'), ""),
        ("app → host tools/call", "6", call.replace('"id":1', '"id":6'), ""),
        ("host → app result", "6", "", "cut short {"),
    ]

    calls = mcp_apps.recorded_calls(rows)

    assert [(c.name, c.arguments, c.error) for c in calls] == [
        ("increment", {"by": 41}, ""),
        ("x", {"by": 41}, "apps listed no tool named 'x'"),
        ("increment", {"by": 41}, "the recorded answer is not kept whole"),
    ]
    assert calls[0].result == {"content": [{"type": "text", "text": "counter at 42"}]}
    assert mcp_apps.recorded_calls([]) == []


def test_an_app_opened_again_is_given_its_recorded_calls_to_replay_and_a_first_view_none(
    client: Client, workbench: None, alice: User
) -> None:
    client.force_login(alice)
    operation = call(client, app_server(), "counter", {})
    first = client.post(f"/servers/op/{operation.public_id}/app").json()
    assert first["replay"] is False and first["recorded"] == []
    request = {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": {"name": "increment", "arguments": {}},
    }
    answer = {"jsonrpc": "2.0", "id": 7, "result": {"content": [{"type": "text", "text": "counter at 2"}]}}
    post_json(
        client,
        f"/servers/op/{operation.public_id}/app/traffic",
        {
            "messages": [
                {"side": "app", "message": json.dumps(request)},
                {"side": "host", "message": json.dumps(answer)},
            ]
        },
    )

    again = client.post(f"/servers/op/{operation.public_id}/app").json()

    assert again["replay"] is True
    assert again["recorded"] == [
        {"name": "increment", "arguments": {}, "result": answer["result"], "error": ""}
    ]
