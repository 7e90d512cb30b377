"""The capture pairs a response with its request exactly as the MCP client library does: the SDK
takes ``"2"`` and ``2`` as one id (``mcp.shared.dispatcher.coerce_request_id``), so the record
says which answer the client used, notes the type the server got wrong, and keeps the answers
that came after it with the operation, as duplicates. (A tester's server answered tools/list,
id 2, with ``"id":"2"``, then ``2``, then once more: the client listed the tools of the first
answer while the record showed tools/list as "no response" and the other two answers went to the
server's transcript.) Real parts: a stdio MCP server written for the test, besides hand-built
messages through the tap."""

from __future__ import annotations

import itertools
import json
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pytest

from servers import gateway
from servers.gateway import ServerConfig
from servers.gateway.capture import Capture, Tap
from tests.servers.test_capture import BODY_LIMIT, CALL, RESULT, notification, request, response, within

_server_ids = itertools.count(9700)

# Answers tools/list with an unknown id, then the request's id as a string, then the id itself,
# then the id again: all four lines in one write, so they reach the client together.
WRONG_ID_SERVER = textwrap.dedent(
    """
    import json, os, sys

    TOOLS = [{"name": "echo", "inputSchema": {"type": "object"}}]

    def line(message):
        return json.dumps(message).encode() + b"\\n"

    for raw in sys.stdin.buffer:
        message = json.loads(raw)
        mid, method = message.get("id"), message.get("method")
        if mid is None:
            continue
        if method == "initialize":
            result = {
                "protocolVersion": message["params"]["protocolVersion"],
                "capabilities": {"tools": {}},
                "serverInfo": {"name": "wrong-id", "version": "1"},
            }
            os.write(1, line({"jsonrpc": "2.0", "id": mid, "result": result}))
        elif method == "tools/list":
            os.write(
                1,
                line({"jsonrpc": "2.0", "id": 99999, "result": {"tools": []}})
                + line({"jsonrpc": "2.0", "id": str(mid), "result": {"tools": TOOLS}})
                + line({"jsonrpc": "2.0", "id": mid, "result": {"tools": TOOLS * 2}})
                + line({"jsonrpc": "2.0", "id": mid, "result": {"tools": []}}),
            )
        else:
            os.write(1, line({"jsonrpc": "2.0", "id": mid, "result": {}}))
    """
)


@pytest.fixture(autouse=True)
def close_sessions() -> Iterator[None]:
    yield
    gateway.close_all()


def wrong_id_server(tmp_path: Path) -> ServerConfig:
    script = tmp_path / "wrong_id_server.py"
    script.write_text(WRONG_ID_SERVER)
    server_id = next(_server_ids)
    return ServerConfig(
        server_id=server_id,
        name=f"wrong-id-{server_id}",
        transport="stdio",
        command=sys.executable,
        args=(str(script),),
        call_timeout=10.0,
    )


def test_a_string_id_answer_is_the_answer_the_client_used_and_the_later_ones_stay_with_the_operation(
    tmp_path: Path,
) -> None:
    outcome = gateway.list_tools(wrong_id_server(tmp_path))

    assert outcome.error == ""
    # The client library took the first answer, the one with the string id.
    assert [tool["name"] for tool in outcome.tools] == ["echo"]
    [listing] = [record for record in outcome.records if record.label == "tools/list"]
    assert listing.status == "ok"
    assert json.loads(listing.response_body)["id"] == "2"
    assert json.loads(listing.response_body)["result"]["tools"] == [
        {"name": "echo", "inputSchema": {"type": "object"}}
    ]
    assert 'answered with the id "2" (a string)' in listing.error
    assert "request id 2 (a number)" in listing.error
    unknown = [record for record in outcome.records if record.label == "response to unknown id"]
    assert [record.jsonrpc_id for record in unknown] == ["99999"]
    duplicates = [record for record in outcome.records if record.label == "duplicate response"]
    assert [json.loads(record.response_body)["id"] for record in duplicates] == [2, 2]
    assert all("tools/list" in record.error and "already answered" in record.error for record in duplicates)
    assert outcome.unclaimed == []


def test_a_response_with_the_string_form_of_the_id_answers_the_request_as_the_client_library_does() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("send", request(1, "tools/call", CALL))
    tap.observe("recv", response("1", RESULT))

    [record] = capture.records
    assert (record.label, record.status) == ("tools/call", "ok")
    assert json.loads(record.response_body)["id"] == "1"
    assert 'the id "1" (a string)' in record.error
    assert tap.unclaimed == []


def test_an_answer_with_the_same_type_of_id_carries_no_note() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("send", request(3, "tools/call", CALL))
    tap.observe("recv", response(3, RESULT))

    [record] = capture.records
    assert (record.status, record.error) == ("ok", "")


def test_a_second_answer_goes_with_the_operation_as_a_duplicate_while_it_is_open() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()
    tap.active.append(capture)

    with within(capture):
        tap.observe("send", request(4, "tools/list"))
    tap.observe("recv", response(4, {"tools": []}))
    tap.observe("recv", response("4", {"tools": []}))

    assert [record.label for record in capture.records] == ["tools/list", "duplicate response"]
    duplicate = capture.records[1]
    assert duplicate.jsonrpc_id == "4"
    assert "already answered" in duplicate.error and "tools/list" in duplicate.error
    assert tap.unclaimed == []


def test_a_string_id_that_is_not_a_number_never_answers_a_numbered_request() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("send", request(1, "tools/call", CALL))
    tap.observe("recv", response("01x", RESULT))

    [stray] = tap.unclaimed
    assert stray.label == "response to unknown id"
    assert capture.records == []


def test_a_progress_token_in_string_form_reaches_the_request_that_carries_it_as_a_number() -> None:
    tap, calling = Tap(body_limit=BODY_LIMIT), Capture()

    with within(calling):
        tap.observe("send", request(5, "tools/call", {**CALL, "_meta": {"progressToken": 5}}))
    tap.observe("recv", notification("notifications/progress", {"progressToken": "5", "progress": 0.5}))

    assert [record.label for record in calling.records] == ["notifications/progress"]
    assert tap.unclaimed == []
