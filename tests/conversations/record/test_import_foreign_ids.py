"""A file claiming the id of a conversation its importer cannot see tells them nothing about it.

The importer compares a file with the local conversation of the id it claims, and names the fields
that differ, only when the importer may see that conversation (``visible_to``). A file claiming any
other id is imported as a new conversation under a fresh id, as one whose id is recorded nowhere
here is: the answer is the same whether or not the id exists.
"""

from __future__ import annotations

import json
import uuid
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.contrib.messages import get_messages
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import call_command
from django.test import Client
from django.urls import reverse

from conversations.models import AuditEvent, Conversation, Exchange, Team, Turn
from conversations.record.integrity import GENESIS, exchange_digest, turn_seal
from conversations.record.transcripts.export import transcript_export
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory

pytestmark = pytest.mark.django_db

SECRET = "alice-secret-7f3c"


def _recorded(owner: User, secret: str, *, turns: int = 1) -> Conversation:
    """A sealed conversation of ``owner`` whose every text names ``secret``: per turn a question and
    an answer, a decide step, a tool step with its arguments, and an exchange of each."""
    conversation = ConversationFactory(owner=owner, title=f"{secret} title")
    for _ in range(turns):
        turn = TurnFactory(
            conversation=conversation, question=f"{secret} question", answer=f"{secret} answer"
        )
        decide = StepFactory(turn=turn, text=f"{secret} thought")
        ExchangeFactory(step=decide, request_body=json.dumps({"content": f"{secret} request"}))
        tool = StepFactory(parent=decide, kind="tool", tool_name="get_forecast", arguments={"city": secret})
        ExchangeFactory(mcp=True, step=tool, response_body=json.dumps({"result": f"{secret} result"}))
    previous = GENESIS
    for turn in Turn.objects.filter(conversation=conversation).order_by("seq"):
        for row in Exchange.objects.filter(turn=turn).order_by("seq", "id"):
            row.prev_hash, row.hash = previous, exchange_digest(row, turn_seq=turn.seq, previous=previous)
            row.save(update_fields=["prev_hash", "hash"])
            previous = row.hash
        turn_seal(turn=turn)
    conversation.refresh_from_db()
    return conversation


def _probe(conversation: Conversation, claimed_id: str) -> bytes:
    """The tester's probe: the export of ``conversation`` claiming ``claimed_id``, made another
    installation's unsigned file (so its own chain cannot be checked here)."""
    document: dict[str, Any] = json.loads(transcript_export(conversation=conversation, fmt="json"))
    document["conversation"]["id"] = claimed_id
    document["conversation"]["integrity"]["key_id"] = "other"
    del document["conversation"]["integrity"]["signature"]
    return json.dumps(document).encode()


def _post(client: Client, data: bytes) -> tuple[int, bytes, list[str], bytes]:
    """What the importer is told: the status, the body, the messages and the page it leads to."""
    upload = SimpleUploadedFile("probe.json", data, content_type="application/json")
    response = client.post(reverse("inspector-conversation-import"), {"transcript": upload})
    said = [str(message) for message in get_messages(response.wsgi_request)]
    page = client.get(response["Location"]).content if response.status_code == 302 else b""
    return response.status_code, response.content, said, page


@pytest.fixture
def alices() -> Conversation:
    return _recorded(User.objects.create_user("alice"), SECRET)


@pytest.mark.parametrize("probe", ["his contents", "more turns", "her contents"])
def test_a_file_claiming_a_conversation_its_importer_cannot_see_answers_as_an_unknown_id(
    alices: Conversation, probe: str
) -> None:
    bob = User.objects.create_user("bob")
    # Bob's own record, or (a guess that matches everything) one with alice's very contents.
    source = {
        "his contents": lambda: _recorded(bob, "bob-own"),
        "more turns": lambda: _recorded(bob, "bob-own", turns=2),
        "her contents": lambda: _recorded(bob, SECRET),
    }[probe]()
    client = Client()
    client.force_login(bob)
    alices_entries = AuditEvent.objects.filter(conversation_public_id=alices.public_id).count()

    answers = []
    for claimed in (str(alices.public_id), str(uuid.uuid4())):
        status, body, said, page = _post(client, _probe(source, claimed))
        assert SECRET.encode() not in body or probe == "her contents"
        assert SECRET.encode() not in page or probe == "her contents"
        answers.append((status, body, said))

    assert answers[0] == answers[1]
    assert answers[0][0] == 302
    imported = Conversation.objects.filter(owner=bob, imported_meta__isnull=False).exclude(pk=source.pk)
    assert imported.count() == 2 and alices.public_id not in {row.public_id for row in imported}
    assert AuditEvent.objects.filter(conversation_public_id=alices.public_id).count() == alices_entries
    assert AuditEvent.objects.filter(action="imported", actor_name="bob").count() == 2


def test_the_import_command_answers_the_same_for_an_id_its_user_cannot_see(
    alices: Conversation, tmp_path: Path
) -> None:
    bob = User.objects.create_user("bob")
    source = _recorded(bob, "bob-own")

    printed = []
    for claimed in (str(alices.public_id), str(uuid.uuid4())):
        path = tmp_path / "probe.json"
        path.write_bytes(_probe(source, claimed))
        out = StringIO()
        call_command("import", str(path), "--user", "bob", stdout=out)
        new_id = str(Conversation.objects.filter(owner=bob).latest("created_at").public_id)
        printed.append(out.getvalue().replace(new_id, "NEW").replace(claimed, "CLAIMED"))

    assert printed[0] == printed[1]
    assert "imported NEW" in printed[0]


@pytest.mark.parametrize("viewer", ["herself", "team mate", "staff"])
def test_who_may_see_the_conversation_still_has_a_differing_file_refused_naming_the_fields(
    alices: Conversation, viewer: str
) -> None:
    user = alices.owner
    if viewer == "team mate":
        user = User.objects.create_user("carol")
        Team.objects.create(name="platform").members.add(alices.owner, user)
    elif viewer == "staff":
        user = User.objects.create_user("dave", is_staff=True)
    client = Client()
    client.force_login(user)
    before = Conversation.objects.count()

    status, body, _, _ = _post(client, _probe(_recorded(user, "another"), str(alices.public_id)))

    assert status == 400
    assert (
        f"a conversation with the id {alices.public_id} is recorded here and the file differs"
        in body.decode()
    )
    assert "turns[0].answer" in body.decode()
    assert Conversation.objects.count() == before + 1  # the probe's source only
