"""The tap pairs and routes hand-built JSON-RPC messages; no server (an event loop only where
an operation waits for HTTP answers)."""

from __future__ import annotations

import asyncio
import json
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import httpx2
from mcp.shared.message import SessionMessage
from mcp.types import ErrorData, JSONRPCError, JSONRPCNotification, JSONRPCRequest, JSONRPCResponse

from servers.gateway.capture import Capture, Tap, current_capture

BODY_LIMIT = 10_000


@contextmanager
def within(capture: Capture) -> Iterator[Capture]:
    """Make ``capture`` the current one, as the gateway does for the calling task."""
    token = current_capture.set(capture)
    try:
        yield capture
    finally:
        current_capture.reset(token)


def request(msg_id: int | str, method: str, params: dict[str, Any] | None = None) -> SessionMessage:
    # Only fields actually given are serialised (exclude_unset), as for SDK-built messages.
    extra = {"params": params} if params is not None else {}
    return SessionMessage(JSONRPCRequest(jsonrpc="2.0", id=msg_id, method=method, **extra))


def response(msg_id: int | str, result: dict[str, Any]) -> SessionMessage:
    return SessionMessage(JSONRPCResponse(jsonrpc="2.0", id=msg_id, result=result))


def error_response(msg_id: int | str, code: int, message: str) -> SessionMessage:
    return SessionMessage(JSONRPCError(jsonrpc="2.0", id=msg_id, error=ErrorData(code=code, message=message)))


def notification(method: str, params: dict[str, Any] | None = None) -> SessionMessage:
    extra = {"params": params} if params is not None else {}
    return SessionMessage(JSONRPCNotification(jsonrpc="2.0", method=method, **extra))


CALL = {"name": "get_weather_forecast", "arguments": {"city": "Paris"}}
RESULT = {"content": [{"type": "text", "text": "sunny"}], "isError": False}


def test_a_request_and_its_response_become_one_record_in_the_current_capture() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("send", request(7, "tools/call", CALL))
    tap.observe("recv", response(7, RESULT))

    [record] = capture.records
    assert record.label == "tools/call"
    assert record.channel == "mcp"
    assert record.direction == "client"
    assert record.jsonrpc_id == "7"
    assert record.status == "ok"
    assert json.loads(record.request_body) == {
        "jsonrpc": "2.0",
        "id": 7,
        "method": "tools/call",
        "params": CALL,
    }
    assert json.loads(record.response_body) == {"jsonrpc": "2.0", "id": 7, "result": RESULT}
    assert record.duration_ms is not None and record.duration_ms >= 0
    assert tap.unclaimed == []


def test_a_response_is_routed_to_the_capture_of_its_request_not_the_current_one() -> None:
    tap, first, second = Tap(body_limit=BODY_LIMIT), Capture(), Capture()

    with within(first):
        tap.observe("send", request(1, "tools/call", CALL))
    with within(second):
        tap.observe("send", request(2, "tools/list"))
        tap.observe("recv", response(1, RESULT))
        tap.observe("recv", response(2, {"tools": []}))

    assert [r.label for r in first.records] == ["tools/call"]
    assert [r.label for r in second.records] == ["tools/list"]


def test_an_error_response_is_recorded_with_its_message() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("send", request(3, "tools/call", {"name": "nope"}))
    tap.observe("recv", error_response(3, -32602, "Tool nope not found"))

    [record] = capture.records
    assert record.status == "error"
    assert record.error == "Tool nope not found"
    assert json.loads(record.response_body)["error"]["code"] == -32602


def test_a_notification_sent_within_a_capture_is_recorded_there() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("send", notification("notifications/initialized"))

    [record] = capture.records
    assert record.label == "notifications/initialized"
    assert record.direction == "client"
    assert json.loads(record.request_body) == {"jsonrpc": "2.0", "method": "notifications/initialized"}
    assert record.response_body == ""
    assert record.jsonrpc_id == ""


def test_a_progress_notification_goes_to_the_capture_of_the_request_that_carries_its_token() -> None:
    tap, calling, other = Tap(body_limit=BODY_LIMIT), Capture(), Capture()
    params = {**CALL, "_meta": {"progressToken": "tok-1"}}

    with within(calling):
        tap.observe("send", request(5, "tools/call", params))
    with within(other):
        tap.observe(
            "recv", notification("notifications/progress", {"progressToken": "tok-1", "progress": 0.5})
        )
    tap.observe("recv", response(5, RESULT))

    assert [r.label for r in calling.records] == ["notifications/progress", "tools/call"]
    progress = calling.records[0]
    assert progress.direction == "server"
    assert json.loads(progress.response_body)["params"]["progress"] == 0.5
    assert other.records == []


def test_a_server_notification_with_no_token_is_unclaimed() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("recv", notification("notifications/tools/list_changed"))

    assert capture.records == []
    [record] = tap.unclaimed
    assert record.label == "notifications/tools/list_changed"
    assert record.direction == "server"


def test_a_response_to_an_unknown_id_is_unclaimed_and_flagged() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("recv", response(99, RESULT))

    assert capture.records == []
    [record] = tap.unclaimed
    assert record.label == "response to unknown id"
    assert record.jsonrpc_id == "99"
    assert record.error == "the id matches no request in flight"
    assert json.loads(record.response_body)["id"] == 99


def test_finish_records_an_unanswered_request_as_no_response_and_closes_the_capture() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("send", request(4, "tools/call", CALL))
    tap.finish(capture)

    [record] = capture.records
    assert record.status == "no response"
    assert record.response_body == ""
    assert record.duration_ms is not None
    assert capture.closed is True


def test_finish_leaves_the_requests_of_other_captures_pending() -> None:
    tap, finished, running = Tap(body_limit=BODY_LIMIT), Capture(), Capture()

    with within(finished):
        tap.observe("send", request(1, "tools/list"))
    with within(running):
        tap.observe("send", request(2, "tools/call", CALL))
    tap.finish(finished)
    tap.observe("recv", response(2, RESULT))

    assert [(r.label, r.status) for r in finished.records] == [("tools/list", "no response")]
    assert [(r.label, r.status) for r in running.records] == [("tools/call", "ok")]


def test_a_late_response_after_finish_is_unclaimed() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("send", request(4, "tools/call", CALL))
    tap.finish(capture)
    tap.observe("recv", response(4, RESULT))

    assert len(capture.records) == 1
    [late] = tap.unclaimed
    assert late.label == "response to unknown id"
    assert late.jsonrpc_id == "4"


def test_records_for_a_closed_capture_go_to_unclaimed() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()
    params = {**CALL, "_meta": {"progressToken": 11}}

    with within(capture):
        tap.observe("send", request(11, "tools/call", params))
        tap.finish(capture)
        tap.observe("send", notification("notifications/cancelled", {"requestId": 11}))
    tap.observe("recv", notification("notifications/progress", {"progressToken": 11, "progress": 1}))

    assert [r.label for r in capture.records] == ["tools/call"]
    assert [r.label for r in tap.unclaimed] == ["notifications/cancelled", "notifications/progress"]


def test_a_server_request_and_the_client_answer_are_paired_as_unclaimed() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("recv", request("srv-1", "roots/list"))
        tap.observe("send", response("srv-1", {"roots": []}))

    assert capture.records == []
    [record] = tap.unclaimed
    assert record.label == "roots/list"
    assert record.direction == "server"
    assert record.status == "ok"
    assert json.loads(record.response_body)["result"] == {"roots": []}


def test_an_exception_received_from_the_stream_is_a_transport_error() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("recv", ValueError("Invalid JSON: expected value at line 1 column 1"))

    assert capture.records == []
    [record] = tap.unclaimed
    assert record.label == "transport error"
    assert record.status == "error"
    assert record.direction == "server"
    assert record.error == "Invalid JSON: expected value at line 1 column 1"
    assert "ValueError" in record.response_body


def test_an_exception_on_the_send_side_goes_to_the_current_capture() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()

    with within(capture):
        tap.observe("send", BrokenPipeError("pipe closed"))

    [record] = capture.records
    assert record.label == "transport error"
    assert record.error == "pipe closed"


def test_bodies_over_the_limit_are_cut_and_marked() -> None:
    tap, capture = Tap(body_limit=200), Capture()
    big = {"content": [{"type": "text", "text": "x" * 5000}], "isError": False}

    with within(capture):
        tap.observe("send", request(1, "tools/call", CALL))
    tap.observe("recv", response(1, big))

    [record] = capture.records
    full_length = len(json.dumps({"jsonrpc": "2.0", "id": 1, "result": big}, separators=(",", ":")))
    kept, marker = record.response_body.split("\n", 1)
    assert len(kept) == 200
    assert marker == f"… [cut: {full_length} characters in all]"
    assert json.loads(record.request_body)["method"] == "tools/call"


def test_a_body_at_the_limit_is_kept_whole() -> None:
    exact = len('{"jsonrpc":"2.0","id":1,"method":"ping"}')
    tap, capture = Tap(body_limit=exact), Capture()

    with within(capture):
        tap.observe("send", request(1, "ping"))
    tap.finish(capture)

    assert capture.records[0].request_body == '{"jsonrpc":"2.0","id":1,"method":"ping"}'


# --- over HTTP: a notification is complete with its HTTP response -----------------------------


def test_over_http_settle_waits_for_the_answer_to_a_notification_sent_within_the_capture() -> None:
    """The SDK's send returns before the POST is answered: the capture waits for the 202."""
    tap, capture = Tap(body_limit=BODY_LIMIT, http=True), Capture()
    with within(capture):
        tap.observe("send", notification("notifications/initialized"))
    body = b'{"jsonrpc":"2.0","method":"notifications/initialized"}'
    record = tap.http_request("POST", "/mcp", httpx2.Headers({"x-team": "inspector"}), body)

    async def answer_later() -> None:
        await asyncio.sleep(0.05)
        tap.http_response(record, 202, httpx2.Headers({"content-length": "0"}))

    async def operation_ends() -> float:
        answering = asyncio.create_task(answer_later())
        started = time.monotonic()
        await tap.settle(capture, seconds=5)
        waited = time.monotonic() - started
        await answering
        tap.finish(capture)
        return waited

    waited = asyncio.run(operation_ends())

    [recorded] = capture.records
    assert recorded.label == "notifications/initialized"
    assert recorded.request_headers[":method"] == "POST" and recorded.request_headers["x-team"] == "inspector"
    assert recorded.response_headers[":status"] == "202"
    assert waited < 5


def test_over_http_settle_gives_up_after_its_budget_and_finish_records_the_notification_as_sent() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT, http=True), Capture()
    with within(capture):
        tap.observe("send", notification("notifications/cancelled", {"requestId": 4}))
    tap.http_request(
        "POST", "/mcp", httpx2.Headers({}), b'{"jsonrpc":"2.0","method":"notifications/cancelled"}'
    )

    async def operation_ends() -> None:
        await tap.settle(capture, seconds=0.05)
        tap.finish(capture)

    asyncio.run(operation_ends())

    [recorded] = capture.records
    assert recorded.label == "notifications/cancelled"
    assert recorded.request_headers[":method"] == "POST"
    assert recorded.response_headers == {}


def test_over_http_settle_does_not_wait_for_the_messages_of_other_captures() -> None:
    tap, mine, other = Tap(body_limit=BODY_LIMIT, http=True), Capture(), Capture()
    with within(other):
        tap.observe("send", notification("notifications/initialized"))

    async def operation_ends() -> float:
        started = time.monotonic()
        await tap.settle(mine, seconds=5)
        return time.monotonic() - started

    assert asyncio.run(operation_ends()) < 1
    assert mine.records == [] and other.records == []


def test_a_response_to_an_unknown_id_goes_with_the_operation_in_flight() -> None:
    tap, capture = Tap(body_limit=BODY_LIMIT), Capture()
    tap.active.append(capture)

    with within(capture):
        tap.observe("send", request(5, "tools/call", CALL))
    tap.observe("recv", response(99, RESULT))

    [decoy] = capture.records
    assert (decoy.label, decoy.jsonrpc_id) == ("response to unknown id", "99")
    assert "in flight" in decoy.error
    assert tap.unclaimed == []
