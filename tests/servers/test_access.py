"""Who sees and may do what in the workbench: alice and bob share a team, carol is alone, dave is staff.

What was done with a server (operations, their questions, saved calls, the transcript) follows
the conversations' rule; starting a stdio server's process is for staff unless the server allows it.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.test import Client

from conversations.models import AuditEvent, Conversation, Exchange, Step, Team, Turn
from conversations.runner import turn_run
from conversations.services import conversation_start, demo_profile_ensure
from servers import gateway, selectors, services
from servers.models import McpServer, Operation, PendingInput, SavedCall
from tests.factories import ConversationFactory, ExchangeFactory, McpServerFactory, TurnFactory

REPO_ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.django_db


@pytest.fixture
def people(db: None) -> dict[str, User]:
    users = {name: User.objects.create_user(name, password="pw") for name in ("alice", "bob", "carol")}
    users["dave"] = User.objects.create_user("dave", password="pw", is_staff=True)
    Team.objects.create(name="platform").members.add(users["alice"], users["bob"])
    return users


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def a_call(server: McpServer, user: User, path: str = "alice-notes.txt") -> Operation:
    operation = Operation.objects.create(
        server=server,
        user=user,
        kind=Operation.Kind.TOOLS_CALL,
        target="read",
        arguments={"path": path},
        status=Operation.Status.OK,
        result={"content": [{"type": "text", "text": f"the text of {path}"}]},
    )
    operation.exchanges.add(
        ExchangeFactory(
            mcp=True, step=None, turn=None, server=server, request_body=json.dumps({"path": path})
        )
    )
    return operation


# --- one rule for operations, questions, saved calls -------------------------------------------


def test_an_operation_is_seen_by_its_user_her_team_mate_and_staff_only(people: dict[str, User]) -> None:
    operation = a_call(McpServerFactory(name="files"), people["alice"])

    seen = {
        name: client_for(user).get(f"/servers/op/{operation.public_id}/").status_code
        for name, user in people.items()
    }

    assert seen == {"alice": 200, "bob": 200, "carol": 404, "dave": 200}


def test_an_operation_from_the_command_line_is_for_staff_only(people: dict[str, User]) -> None:
    operation = Operation.objects.create(
        server=McpServerFactory(name="files"),
        user=None,
        source=Operation.Source.CLI,
        kind=Operation.Kind.CONNECT,
    )

    assert client_for(people["alice"]).get(f"/servers/op/{operation.public_id}/").status_code == 404
    assert client_for(people["dave"]).get(f"/servers/op/{operation.public_id}/").status_code == 200


def test_carol_cannot_answer_alices_question_but_her_team_mate_can(people: dict[str, User]) -> None:
    operation = a_call(McpServerFactory(name="files"), people["alice"])
    question = PendingInput.objects.create(operation=operation, params={"message": "Delete it?"})
    url = f"/servers/op/{operation.public_id}/questions/{question.pk}"

    assert client_for(people["carol"]).post(url, {"action": "decline"}).status_code == 404
    question.refresh_from_db()
    assert question.status == PendingInput.Status.WAITING
    assert client_for(people["bob"]).post(url, {"action": "decline"}).status_code == 302
    question.refresh_from_db()
    assert question.status == PendingInput.Status.DECLINED


def test_a_saved_call_is_listed_run_and_deleted_by_its_team_only(
    people: dict[str, User], settings: Any
) -> None:
    settings.WORKBENCH_RUNNER = "inline"
    server = McpServerFactory(name="files")
    saved = SavedCall.objects.create(server=server, owner=people["alice"], name="alice-weekly", tool="read")

    carol = client_for(people["carol"])
    assert "alice-weekly" not in carol.get(f"/servers/{server.name}/").content.decode()
    assert carol.post(f"/servers/saved/{saved.public_id}/delete").status_code == 404
    assert carol.post(f"/servers/saved/{saved.public_id}/run").status_code == 404
    assert SavedCall.objects.filter(pk=saved.pk).exists()
    assert "alice-weekly" in client_for(people["bob"]).get(f"/servers/{server.name}/").content.decode()
    assert client_for(people["dave"]).post(f"/servers/saved/{saved.public_id}/delete").status_code == 302
    assert not SavedCall.objects.filter(pk=saved.pk).exists()


def test_the_server_page_lists_only_the_operations_the_viewer_may_open(people: dict[str, User]) -> None:
    server = McpServerFactory(name="files")
    operation = a_call(server, people["alice"])
    link = f"/servers/op/{operation.public_id}/"

    assert link not in client_for(people["carol"]).get(f"/servers/{server.name}/").content.decode()
    assert link in client_for(people["bob"]).get(f"/servers/{server.name}/").content.decode()


# --- side channels: lint findings, listings, the transcript ------------------------------------


def _listed(server: McpServer, user: User | None, tools: list[str]) -> None:
    Operation.objects.create(
        server=server,
        user=user,
        kind=Operation.Kind.TOOLS_LIST,
        status=Operation.Status.OK,
        result=[
            {
                "name": name,
                "description": "Read one file from the workspace.",
                "inputSchema": {"type": "object"},
            }
            for name in tools
        ],
    )


def test_a_lint_finding_names_only_conversations_the_viewer_may_see(people: dict[str, User]) -> None:
    files, notes = McpServerFactory(name="files"), McpServerFactory(name="notes")
    for user in (people["alice"], people["carol"]):
        _listed(files, user, ["read"])
        _listed(notes, user, ["read"])
    ConversationFactory(owner=people["carol"], title="Carol's cleanup", servers=[files, notes])
    ConversationFactory(owner=people["alice"], title="Alice's merger plans", servers=[files, notes])

    page = client_for(people["carol"]).get("/servers/files/").content.decode()

    assert "Carol's cleanup" in lint_text(files, people["carol"])
    assert "merger" not in lint_text(files, people["carol"]) and "merger" not in page
    assert "Carol&#x27;s cleanup" in page
    assert "merger" in lint_text(files, people["dave"])


def lint_text(server: McpServer, user: User) -> str:
    _, reports, overall = selectors.server_tool_reports(server=server, user=user)
    return " ".join(
        finding.message for finding in [*overall, *(f for report in reports for f in report.findings)]
    )


def test_a_listing_made_by_someone_else_is_not_shown(people: dict[str, User]) -> None:
    files = McpServerFactory(name="files")
    _listed(files, people["alice"], ["alices_private_tool"])

    assert "alices_private_tool" not in client_for(people["carol"]).get("/servers/files/").content.decode()
    assert "alices_private_tool" in client_for(people["bob"]).get("/servers/files/").content.decode()


def test_the_transcript_shows_a_non_owner_their_own_operations_and_turns_only(
    people: dict[str, User],
) -> None:
    server = McpServerFactory(name="files")
    alices = a_call(server, people["alice"])
    carols = a_call(server, people["carol"], "carol-todo.txt")
    unclaimed = ExchangeFactory(
        mcp=True, step=None, turn=None, server=server, label="stderr", response_body="boot"
    )
    alice_turn = TurnFactory(conversation=ConversationFactory(owner=people["alice"]))
    carol_turn = TurnFactory(conversation=ConversationFactory(owner=people["carol"]))
    in_alices_turn = ExchangeFactory(mcp=True, server=server, step=None, turn=alice_turn)
    in_carols_turn = ExchangeFactory(mcp=True, server=server, step=None, turn=carol_turn)

    def shown(user: User, turns: bool) -> set[int]:
        return set(
            selectors.server_transcript(server=server, user=user, turns=turns).values_list("pk", flat=True)
        )

    alice_ops = set(alices.exchanges.values_list("pk", flat=True))
    carol_ops = set(carols.exchanges.values_list("pk", flat=True))
    assert shown(people["carol"], False) == carol_ops
    assert shown(people["carol"], True) == carol_ops | {in_carols_turn.pk}
    assert shown(people["bob"], True) == alice_ops | {in_alices_turn.pk}
    assert shown(people["dave"], False) == alice_ops | carol_ops | {unclaimed.pk}
    assert shown(people["dave"], True) == set(
        Exchange.objects.filter(server=server).values_list("pk", flat=True)
    )
    export = client_for(people["carol"]).get("/servers/files/transcript.json?turns=1").json()
    page = client_for(people["carol"]).get("/servers/files/transcript?turns=1").content.decode()
    assert len(export["messages"]) == 2 and "alice-notes" not in json.dumps(export)
    assert "carol-todo" in page and "alice-notes" not in page and "boot" not in page


# --- who may start a stdio server's process ----------------------------------------------------


def test_only_staff_may_start_a_stdio_server_unless_it_allows_everyone(people: dict[str, User]) -> None:
    files = McpServerFactory(name="files")

    assert selectors.server_spawn_refusal(server=files, user=people["dave"]) == ""
    assert selectors.server_spawn_refusal(server=files, user=None) == ""
    assert "only staff may start it" in selectors.server_spawn_refusal(server=files, user=people["carol"])
    with pytest.raises(services.SpawnRefused):
        services.operation_start(server=files, user=people["carol"], kind=Operation.Kind.TOOLS_LIST)
    assert not Operation.objects.exists()
    files.allow_non_staff_spawn = True
    assert selectors.server_spawn_refusal(server=files, user=people["carol"]) == ""


def test_an_http_server_is_anyones_to_call() -> None:
    server = McpServerFactory(
        name="remote", transport="http", command="", args=[], url="https://mcp.example.com/mcp"
    )
    carol = User.objects.create_user("carol")

    assert selectors.server_spawn_refusal(server=server, user=carol) == ""


def test_the_workbench_tells_a_non_staff_user_why_nothing_was_started(people: dict[str, User]) -> None:
    files = McpServerFactory(name="files")
    _listed(files, people["carol"], ["read"])
    carol = client_for(people["carol"])

    page = carol.get("/servers/files/").content.decode()
    refused = carol.post("/servers/files/tools/read", {"arguments": "{}"})
    completion = carol.post("/servers/files/complete", {})

    assert 'id="spawn-refusal"' in page and 'id="connect"' not in page
    assert refused.status_code == 403 and "only staff may start it" in refused.content.decode()
    assert completion.status_code == 403 and "only staff may start it" in completion.json()["error"]
    assert not Operation.objects.filter(user=people["carol"]).exclude(kind=Operation.Kind.TOOLS_LIST).exists()


@pytest.mark.django_db(transaction=True)
def test_a_server_that_allows_everyone_is_started_for_a_non_staff_user(settings: Any) -> None:
    settings.WORKBENCH_RUNNER = "inline"
    carol = User.objects.create_user("carol", password="pw")
    demo = services.demo_server_ensure()
    try:
        response = client_for(carol).post(f"/servers/{demo.name}/list/tools")
    finally:
        gateway.close_all()

    assert demo.allow_non_staff_spawn and response.status_code == 302
    listing = Operation.objects.get(user=carol, kind=Operation.Kind.TOOLS_LIST)
    assert listing.status == Operation.Status.OK and listing.session["spawned"]


@pytest.mark.django_db(transaction=True)
def test_the_connect_step_says_why_a_server_was_not_started_and_the_turn_goes_on() -> None:
    carol = User.objects.create_user("carol")
    files = McpServer.objects.create(
        name="files",
        transport="stdio",
        command=sys.executable,
        args=["-m", "servers.demo_server"],
        cwd=str(REPO_ROOT),
    )
    _, turn = conversation_start(
        owner=carol,
        model_profile=demo_profile_ensure(),
        question="What is 2 + 2?",
        servers=[files, services.demo_server_ensure()],
        dispatch=False,
    )
    try:
        turn_run(turn_id=turn.pk)
    finally:
        gateway.close_all()

    turn.refresh_from_db()
    connect = Step.objects.get(turn=turn, kind="connect")
    assert turn.status == Turn.Status.DONE
    assert connect.status == "error"
    assert any("files starts a process on the worker" in problem for problem in connect.diagnostics)
    assert "files: not connected" in connect.text
    assert {tool["server"] for tool in turn.tools} == {"demo"}


def test_a_team_mate_may_not_ask_where_only_staff_may_start_a_server(people: dict[str, User]) -> None:
    files = McpServerFactory(name="files")
    conversation: Conversation = ConversationFactory(owner=people["dave"], servers=[files])
    Team.objects.get(name="platform").members.add(people["dave"])

    response = client_for(people["bob"]).post(f"/c/{conversation.public_id}/ask", {"question": "And now?"})

    assert response.status_code == 403
    assert "only staff may start it" in response.content.decode()
    assert not conversation.turns.exists()


def test_turn_messages_in_a_server_transcript_are_audited_as_reads_of_their_conversation(
    people: dict[str, User],
) -> None:
    server = McpServerFactory(name="files")
    turn = TurnFactory(conversation=ConversationFactory(owner=people["alice"]))
    ExchangeFactory(mcp=True, server=server, step=None, turn=turn)
    bob = client_for(people["bob"])

    bob.get("/servers/files/transcript")
    assert not AuditEvent.objects.exists()
    bob.get("/servers/files/transcript?turns=1")
    bob.get("/servers/files/transcript.json?turns=1")

    reads = AuditEvent.objects.filter(actor=people["bob"], conversation_public_id=turn.conversation.public_id)
    assert sorted(reads.values_list("via", flat=True)) == ["server transcript", "server transcript download"]
