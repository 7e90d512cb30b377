"""Requests in both directions reach the record the moment they are sent, not when answered: the
tap tells the operation's listener of each request at once, and the workbench writes it as a
``pending`` row that its answer later completes (one row per message, never two)."""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any

import pytest

from conversations.loop.wire import WireExchange
from conversations.models import Exchange
from conversations.redaction import redactor
from servers.gateway.capture import Capture, Tap
from servers.models import McpServer, Operation
from servers.operations import _Recorder
from tests.servers.test_capture import BODY_LIMIT, CALL, RESULT, notification, request, response, within

ELICIT = {"message": "Your name?", "requestedSchema": {"type": "object", "properties": {}}}


def _following() -> tuple[Tap, Capture, list[tuple[str, str]]]:
    """A tap with one open operation whose listener notes (label, status) as it is told."""
    seen: list[tuple[str, str]] = []
    tap = Tap(body_limit=BODY_LIMIT)
    capture = Capture(listener=lambda record: seen.append((record.label, record.status)))
    tap.active.append(capture)
    return tap, capture, seen


def test_a_call_and_the_servers_question_are_told_while_both_wait_then_again_when_answered() -> None:
    tap, capture, seen = _following()

    with within(capture):
        tap.observe("send", request(1, "tools/call", CALL))
    tap.observe("recv", request(0, "elicitation/create", ELICIT))

    assert seen == [("tools/call", ""), ("elicitation/create", "")]
    assert capture.records == []  # nothing is finished yet

    with within(capture):
        tap.observe("send", response(0, {"action": "accept", "content": {}}))
    tap.observe("recv", response(1, RESULT))

    assert seen[2:] == [("elicitation/create", "ok"), ("tools/call", "ok")]
    assert [record.label for record in capture.records] == ["elicitation/create", "tools/call"]


def test_a_notification_is_told_once_and_a_closed_operation_is_not_told_of_new_requests() -> None:
    tap, capture, seen = _following()
    with within(capture):
        tap.observe("send", notification("notifications/initialized"))
    assert seen == [("notifications/initialized", "")]

    tap.finish(capture)
    with within(capture):
        tap.observe("send", request(9, "ping"))
    assert seen == [("notifications/initialized", "")]


def test_resource_updates_go_to_the_subscription_following_that_uri_and_others_stay_unclaimed() -> None:
    tap = Tap(body_limit=BODY_LIMIT)
    subscription, call = Capture(), Capture()
    subscription.watching.add("demo://a")
    tap.active.extend([subscription, call])

    tap.observe("recv", notification("notifications/resources/updated", {"uri": "demo://a"}))
    tap.observe("recv", notification("notifications/resources/updated", {"uri": "demo://b"}))
    tap.observe("recv", request(3, "elicitation/create", ELICIT))

    assert [r.label for r in subscription.records] == ["notifications/resources/updated"]
    assert [r.label for r in tap.unclaimed] == ["notifications/resources/updated"]
    # The server's question goes to the call open beside the subscription, not to it.
    assert tap.newest_active() is call


def test_the_end_of_a_session_is_told_to_the_operations_open_on_it() -> None:
    tap = Tap(body_limit=BODY_LIMIT)
    subscription = Capture()
    tap.active.append(subscription)
    tap.session_over()
    assert subscription.session_lost.is_set()


@pytest.fixture
def operation(db: None) -> Operation:
    server = McpServer.objects.create(name="srv", command="true")
    return Operation.objects.create(server=server, kind=Operation.Kind.TOOLS_CALL, target="t")


def _rows(operation: Operation) -> list[tuple[Any, ...]]:
    return list(operation.exchanges.order_by("seq").values_list("seq", "label", "status", "response_body"))


def test_the_workbench_writes_a_pending_request_at_once_and_completes_the_same_row(
    operation: Operation,
) -> None:
    tap, capture, _ = _following()
    recorder = _Recorder(operation, redactor(), None)
    capture.listener = lambda record: recorder.record([record])

    with within(capture):
        tap.observe("send", request(1, "tools/call", CALL))
    tap.observe("recv", request(0, "elicitation/create", ELICIT))
    assert _rows(operation) == [(1, "tools/call", "pending", ""), (2, "elicitation/create", "pending", "")]

    with within(capture):
        tap.observe("send", response(0, {"action": "decline"}))
    tap.observe("recv", response(1, RESULT))

    rows = _rows(operation)
    assert [(seq, label, status) for seq, label, status, _ in rows] == [
        (1, "tools/call", "ok"),
        (2, "elicitation/create", "ok"),
    ]
    assert '"decline"' in rows[1][3] and '"sunny"' in rows[0][3]
    assert Exchange.objects.count() == 2


def test_a_request_seen_only_once_answered_is_written_once(operation: Operation) -> None:
    """The follower may take the first telling after the answer has already arrived."""
    recorder = _Recorder(operation, redactor(), None)
    record = WireExchange(
        channel="mcp", label="tools/call", started_at=datetime.now(UTC), jsonrpc_id="1", request_body="{}"
    )
    record.response_body, record.status = "{}", "ok"
    recorder.record([record])
    recorder.record([record])
    assert _rows(operation) == [(1, "tools/call", "ok", "{}")]


def test_a_request_left_unanswered_ends_as_no_response(operation: Operation) -> None:
    tap, capture, _ = _following()
    recorder = _Recorder(operation, redactor(), None)
    capture.listener = lambda record: recorder.record([record])
    with within(capture):
        tap.observe("send", request(1, "tools/call", CALL))
    tap.finish(capture)
    assert [(label, status) for _, label, status, _ in _rows(operation)] == [("tools/call", "no response")]


def test_an_update_with_a_hostile_uri_is_kept_unclaimed_and_cut_to_the_body_limit() -> None:
    tap = Tap(body_limit=BODY_LIMIT)
    subscription = Capture()
    subscription.watching.add("demo://a")
    tap.active.append(subscription)

    tap.observe("recv", notification("notifications/resources/updated", {"uri": 7}))
    tap.observe("recv", notification("notifications/resources/updated", {"uri": {"uri": "demo://a"}}))
    tap.observe("recv", notification("notifications/resources/updated", {"uri": "demo://a" + "é" * 20_000}))

    assert subscription.records == []
    assert len(tap.unclaimed) == 3
    assert tap.unclaimed[2].response_body.endswith("characters in all]")
