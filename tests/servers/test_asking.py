"""A server that asks back — elicitation, sampling, roots — in both protocol eras.

At the 2026-07-28 era the call comes back ``input_required`` and is retried with the answers:
the round trips are one logical call, one operation. At the handshake era the server sends its
own request in the middle of the call. Either way the person answers in the page and the model
answers sampling, and every message is recorded under the operation.
"""

from __future__ import annotations

import json
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from django.contrib.auth.models import User
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import connections
from django.test import Client

from conversations.services import demo_profile_ensure
from servers import selectors, services
from servers.models import McpServer, Operation, PendingInput
from servers.operations import elicitation_preset_answer, operation_run

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db(transaction=True)


def asking(era: str, **fields: object) -> McpServer:
    return services.server_save(
        server=None,
        owner=None,
        fields={
            "name": f"asking-{era.replace('-', '')}",
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-m", "tests.fixtures.asking_server"],
            "cwd": str(REPO_ROOT),
            "era": era,
            "call_timeout": 20.0,
            **fields,
        },
        env={},
        secret_env={},
        headers={},
        secret_headers={},
    )


def wait_for(check: Callable[[], object], timeout: float = 20.0) -> object:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = check()
        if value:
            return value
        time.sleep(0.05)
    pytest.fail("timed out waiting")


def run_in_background(operation: Operation) -> threading.Thread:
    """The operation run on a thread of its own, as the workbench's pool runs it: the thread hands
    its database connection back when the run ends."""

    def run() -> None:
        try:
            operation_run(operation_id=operation.pk)
        finally:
            connections.close_all()

    worker = threading.Thread(target=run, name=f"operation-{operation.pk}")
    worker.start()
    return worker


def call(server: McpServer, tool: str, arguments: dict[str, object], user: User | None = None) -> Operation:
    return Operation.objects.create(
        server=server, user=user, kind=Operation.Kind.TOOLS_CALL, target=tool, arguments=arguments
    )


def labels(operation: Operation) -> list[str]:
    return [exchange.label for exchange in selectors.operation_exchanges(operation=operation)]


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_the_person_answers_the_servers_question_in_the_page_and_the_call_completes(
    client: Client, workbench: None, era: str
) -> None:
    alice = User.objects.create_user("alice", password="pw")
    client.force_login(alice)
    server = asking(era)
    operation = call(server, "delete_record", {"name": "invoice-7"}, user=alice)

    worker = run_in_background(operation)
    question = wait_for(lambda: PendingInput.objects.filter(operation=operation).first())
    assert isinstance(question, PendingInput)
    page = client.get(f"/servers/op/{operation.public_id}/").content.decode()
    assert "Delete the record &#x27;invoice-7&#x27;?" in page and "Send" in page
    answered = client.post(
        f"/servers/op/{operation.public_id}/questions/{question.pk}",
        {"action": "accept", "content": json.dumps({"confirm": True, "reason": "duplicate"})},
    )
    worker.join(timeout=30)

    assert answered.status_code == 302
    operation.refresh_from_db()
    assert operation.status == "ok", operation.error
    assert operation.result["content"][0]["text"] == "Deleted invoice-7 (duplicate)."
    sent = labels(operation)
    if era == "modern":
        # One logical call: the first round came back input_required, the retry carried the answer.
        assert sent.count("tools/call") == 2 and "elicitation/create" not in sent
        first, retry = [
            e for e in selectors.operation_exchanges(operation=operation) if e.label == "tools/call"
        ]
        assert '"input_required"' in first.response_body
        assert "inputResponses" in retry.request_body and '"duplicate"' in retry.request_body
    else:
        assert sent.count("tools/call") == 1 and "elicitation/create" in sent
    question.refresh_from_db()
    assert question.status == "accept"


def test_a_declined_question_is_what_the_tool_hears(workbench: None) -> None:
    server = asking("legacy")
    operation = call(server, "delete_record", {"name": "invoice-8"})

    worker = run_in_background(operation)
    question = wait_for(lambda: PendingInput.objects.filter(operation=operation).first())
    assert isinstance(question, PendingInput)
    assert services.question_answer(question=question, action="decline", content=None) is True
    worker.join(timeout=30)

    operation.refresh_from_db()
    assert operation.result["content"][0]["text"] == "Kept invoice-8: the user said decline."
    assert services.question_answer(question=question, action="accept", content={}) is False


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_sampling_is_answered_by_the_chosen_model_and_its_call_is_recorded_under_the_operation(
    workbench: None, era: str
) -> None:
    server = asking(era, sampling_profile=demo_profile_ensure())

    operation = services.operation_start(
        server=server,
        user=None,
        kind=Operation.Kind.TOOLS_CALL,
        target="one_line_about",
        arguments={"topic": "tea"},
    )

    assert operation.status == "ok", operation.error
    assert operation.result["content"][0]["text"].startswith("The model (")
    exchanges = selectors.operation_exchanges(operation=operation)
    model_calls = [e for e in exchanges if e.channel == "llm"]
    assert len(model_calls) == 1
    assert "Write one line about tea." in model_calls[0].request_body
    assert model_calls[0].response_body


def test_without_a_sampling_model_the_capability_is_not_offered_and_the_error_says_so(
    workbench: None,
) -> None:
    server = asking("legacy")

    operation = services.operation_start(
        server=server,
        user=None,
        kind=Operation.Kind.TOOLS_CALL,
        target="one_line_about",
        arguments={"topic": "tea"},
    )

    # No model configured: the workbench does not offer sampling, and the server says so.
    assert operation.status == "error"
    assert "-32021" in operation.error and "sampling capability" in operation.error
    assert labels(operation)[-1] == "tools/call"


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_roots_come_from_the_servers_configured_list(workbench: None, era: str) -> None:
    server = asking(
        era, roots=[{"uri": "file:///srv/data", "name": "data"}, {"uri": "file:///srv/logs", "name": "logs"}]
    )

    operation = services.operation_start(
        server=server, user=None, kind=Operation.Kind.TOOLS_CALL, target="count_roots", arguments={}
    )

    assert operation.status == "ok", operation.error
    assert operation.result["content"][0]["text"] == "2 roots: file:///srv/data, file:///srv/logs"


# --- nobody to ask: `manage.py server call --elicitation` -------------------------------------


@pytest.mark.parametrize("era", ["modern", "legacy"])
def test_the_cli_told_to_accept_defaults_answers_with_each_requested_default(
    workbench: None, era: str, capsys: pytest.CaptureFixture[str]
) -> None:
    server = asking(era)

    call_command(
        "server", "call", server.name, "order_coffee", "--args", '{"drink": "latte"}',
        "--elicitation", "accept-defaults",
    )  # fmt: skip
    printed = capsys.readouterr()

    assert "One medium latte, 1 sugar(s)." in printed.out
    assert "elicitation: How would you like your latte? -> accept" in printed.err
    question = PendingInput.objects.get(operation__server=server)
    defaults = {"size": "medium", "sugars": 1, "decaf": False}
    assert question.status == "accept" and question.answer == {"action": "accept", "content": defaults}
    operation = question.operation
    if era == "legacy":
        asked = next(
            e for e in selectors.operation_exchanges(operation=operation) if e.label == "elicitation/create"
        )
        assert json.loads(asked.response_body)["result"] == {"action": "accept", "content": defaults}


def test_accept_defaults_declines_a_question_whose_required_field_has_no_default(
    workbench: None, capsys: pytest.CaptureFixture[str]
) -> None:
    server = asking("legacy")

    call_command(
        "server", "call", server.name, "delete_record", "--args", '{"name": "invoice-9"}',
        "--elicitation", "accept-defaults",
    )  # fmt: skip
    printed = capsys.readouterr()

    assert "Kept invoice-9: the user said decline." in printed.out
    assert "-> decline (confirm is required and has no usable default)" in printed.err
    assert PendingInput.objects.get(operation__server=server).status == "decline"


@pytest.mark.parametrize("preset", ["decline", "cancel"])
def test_the_cli_told_to_decline_or_cancel_says_so_to_the_server(
    workbench: None, preset: str, capsys: pytest.CaptureFixture[str]
) -> None:
    server = asking("legacy")

    call_command(
        "server", "call", server.name, "order_coffee", "--args", '{"drink": "tea"}', "--elicitation", preset
    )

    assert f"No tea: the user said {preset}." in capsys.readouterr().out


def test_without_an_elicitation_preset_the_cli_does_not_offer_elicitation(workbench: None) -> None:
    server = asking("legacy")

    with pytest.raises(CommandError):
        call_command("server", "call", server.name, "order_coffee", "--args", '{"drink": "tea"}')

    operation = Operation.objects.get(server=server, kind=Operation.Kind.TOOLS_CALL)
    initialize = next(
        e for e in selectors.operation_exchanges(operation=operation) if e.label == "initialize"
    )
    assert "elicitation" not in json.loads(initialize.request_body)["params"]["capabilities"]
    assert not PendingInput.objects.filter(operation=operation).exists()


HOSTILE_REQUESTS: list[object] = [
    {},
    {"message": "x", "requestedSchema": "not a schema"},
    {"message": "x", "requestedSchema": {"properties": ["a", "b"]}},
    {"message": "x", "requestedSchema": {"properties": {"a": "not a schema"}, "required": "a"}},
    {"message": "x", "requestedSchema": {"properties": {"a": {"type": "string"}}, "required": ["a"]}},
    {"message": "x", "mode": "url", "url": "https://example.com/connect", "elicitationId": "1"},
    ["not", "an", "object"],
]


@pytest.mark.parametrize("params", HOSTILE_REQUESTS)
def test_accept_defaults_declines_what_it_cannot_fill_and_never_raises(params: object) -> None:
    answer, why = elicitation_preset_answer(preset="accept-defaults", params=params)

    assert answer == {"action": "decline"} and why


def test_accept_defaults_leaves_out_defaults_no_answer_can_hold_and_fields_without_one() -> None:
    nested: object = "deep"
    for _ in range(200):
        nested = {"n": nested}
    params = {
        "message": "x",
        "requestedSchema": {
            "properties": {
                "deep": {"type": "object", "default": nested},
                "free": {"type": "string"},
                "tags": {"type": "array", "default": ["a", "b"]},
                "count": {"type": "integer", "default": 3},
            },
            "required": ["count"],
        },
    }

    answer, why = elicitation_preset_answer(preset="accept-defaults", params=params)

    assert answer == {"action": "accept", "content": {"tags": ["a", "b"], "count": 3}} and why == ""
    params["requestedSchema"]["required"] = ["deep"]  # type: ignore[index]
    assert elicitation_preset_answer(preset="accept-defaults", params=params) == (
        {"action": "decline"},
        "deep is required and has no usable default",
    )


@pytest.mark.parametrize(
    ("field", "default", "problem"),
    [
        ({"type": "string", "format": "email"}, "not an address", "is not a 'email'"),
        ({"type": "string", "format": "uri"}, "no scheme here", "is not a 'uri'"),
        ({"type": "string", "format": "date"}, "2026-02-30", "is not a 'date'"),
        ({"type": "string", "format": "date-time"}, "2026-12-05 10:00", "is not a 'date-time'"),
        ({"type": "integer", "minimum": 1, "maximum": 10}, 50, "50 is greater than the maximum of 10"),
        ({"type": "number", "minimum": 0}, -1.5, "-1.5 is less than the minimum of 0"),
    ],
    ids=["email", "uri", "date", "date-time", "maximum", "minimum"],
)
def test_accept_defaults_declines_defaults_that_fail_the_requested_format_or_bounds(
    field: dict[str, object], default: object, problem: str
) -> None:
    params = {
        "message": "x",
        "requestedSchema": {"type": "object", "properties": {"value": {**field, "default": default}}},
    }

    answer, why = elicitation_preset_answer(preset="accept-defaults", params=params)

    assert answer == {"action": "decline"}
    assert why.startswith("the defaults do not match the requested schema: value: ") and problem in why, why


def test_accept_defaults_sends_defaults_that_pass_the_requested_formats_and_bounds() -> None:
    properties = {
        "email": {"type": "string", "format": "email", "default": "alice@example.com"},
        "site": {"type": "string", "format": "uri", "default": "https://example.com/a"},
        "day": {"type": "string", "format": "date", "default": "2026-12-05"},
        "at": {"type": "string", "format": "date-time", "default": "2026-12-05T10:00:00Z"},
        "count": {"type": "integer", "minimum": 1, "maximum": 10, "default": 3},
    }
    params = {"message": "x", "requestedSchema": {"type": "object", "properties": properties}}

    answer, why = elicitation_preset_answer(preset="accept-defaults", params=params)

    assert why == ""
    assert answer == {
        "action": "accept",
        "content": {name: spec["default"] for name, spec in properties.items()},
    }
