"""Well-formed JSON that no database can store, or no date can hold, is refused as any other
unimportable file is: a 400 that says what and where (``This file cannot be imported: …``) on the
import page, a ``CommandError`` from ``manage.py import``, and nothing stored.

The test walks the export of a conversation whose every text field is filled, and puts a lone
surrogate (``"\\ud800"`` in JSON: ``conversations.escaping`` says why nothing stores one) into each
string and each key in turn, and a date out of ``datetime``'s range into each time.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable, Iterator
from io import StringIO
from pathlib import Path
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.core.management import CommandError, call_command
from django.test import Client
from django.urls import reverse

from conversations.models import Conversation, Exchange, ModelProfile, Step, Turn
from conversations.record.integrity import GENESIS, exchange_digest, turn_seal
from conversations.record.transcripts.export import transcript_export
from tests.factories import (
    ConversationFactory,
    ExchangeFactory,
    McpServerFactory,
    StepFactory,
    TurnFactory,
)

pytestmark = pytest.mark.django_db

# Before year 1 and after year 9999 once in UTC: ``astimezone`` cannot say them.
OUT_OF_RANGE = ("0001-01-01T00:00:00+01:00", "9999-12-31T23:59:59-01:00")
LONE = "\ud800"

Where = tuple[str | int, ...]


def _filled(owner: User) -> dict[str, Any]:
    """The json export of a sealed conversation with a value in every text field it stores."""
    server = McpServerFactory(name="weather")
    conversation = ConversationFactory(
        owner=owner, title="title", tool_choice_name="get_forecast", servers=[server]
    )
    turn = TurnFactory(
        conversation=conversation,
        question="question",
        answer="answer",
        error="turn error",
        tool_choice_name="get_forecast",
        tools=[{"name": "get_forecast", "description": "forecast", "server": "weather"}],
        transcript=[{"role": "user", "content": "question"}],
    )
    decide = StepFactory(
        turn=turn,
        prompt="prompt",
        prompt_source="template",
        text="thought",
        tokens={"prompt": 12},
        usage={"prompt_tokens": 12},
        calls=[{"id": "call-1", "name": "get_forecast", "arguments": {"city": "Paris"}}],
        diagnostics=[{"note": "diagnostic"}],
        error="step error",
    )
    ExchangeFactory(step=decide, error="exchange error")
    tool = StepFactory(
        parent=decide,
        kind="tool",
        tool_name="get_forecast",
        server_name="weather",
        arguments={"city": "Paris"},
        result={"sky": "clear"},
    )
    ExchangeFactory(mcp=True, step=tool, server_name="weather")
    ExchangeFactory(step=None, turn=turn, label="turn-level exchange")
    previous = GENESIS
    for row in Exchange.objects.filter(turn=turn).order_by("seq", "id"):
        row.prev_hash, row.hash = previous, exchange_digest(row, turn_seq=turn.seq, previous=previous)
        row.save(update_fields=["prev_hash", "hash"])
        previous = row.hash
    turn_seal(turn=turn)
    document: dict[str, Any] = json.loads(transcript_export(conversation=conversation, fmt="json"))
    return document


def _strings(value: Any, path: Where = ()) -> Iterator[tuple[Where, bool]]:
    """Every string of a JSON value: (its path, whether it is a key rather than a value)."""
    if isinstance(value, str):
        yield path, False
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _strings(item, (*path, index))
    elif isinstance(value, dict):
        for key, item in value.items():
            yield (*path, key), True
            yield from _strings(item, (*path, key))


def _hostile(document: dict[str, Any]) -> Iterator[tuple[str, bytes]]:
    """(what was changed, the file) for each string and key given a lone surrogate, and each time
    given a date out of range."""
    for path, is_key in _strings(document):
        changed = copy.deepcopy(document)
        *parents, last = path
        holder: Any = changed
        for part in parents:
            holder = holder[part]
        if is_key:
            holder[f"{last}{LONE}"] = holder.pop(last)
        else:
            holder[last] = f"{holder[last]}{LONE}"
        # json.dumps writes the lone surrogate as the escape \ud800: valid JSON, valid UTF-8.
        yield f"{'key ' if is_key else ''}{path}", json.dumps(changed).encode()
        if not is_key and str(last).endswith("_at"):
            for moment in OUT_OF_RANGE:
                holder[last] = moment
                yield f"{path} = {moment}", json.dumps(changed).encode()


def _stored() -> tuple[int, ...]:
    return tuple(model.objects.count() for model in (Conversation, Turn, Step, Exchange, ModelProfile))


def _by_page(user: User, _: Path) -> Callable[[bytes], str | None]:
    client = Client()
    client.force_login(user)

    def post(data: bytes) -> str | None:
        upload = SimpleUploadedFile("hostile.json", data, content_type="application/json")
        response = client.post(reverse("inspector-conversation-import"), {"transcript": upload})
        body = response.content.decode()
        if response.status_code == 400 and "This file cannot be imported: " in body:
            return None
        return f"{response.status_code}: {body[:200]}"

    return post


def _by_command(user: User, tmp_path: Path) -> Callable[[bytes], str | None]:
    def run(data: bytes) -> str | None:
        path = tmp_path / "hostile.json"
        path.write_bytes(data)
        try:
            call_command("import", str(path), "--user", user.get_username(), stdout=StringIO())
        except CommandError as exc:
            return None if str(exc).startswith(f"cannot import {path}: ") else f"CommandError {exc}"
        return "imported"

    return run


@pytest.mark.parametrize("entry", [_by_page, _by_command], ids=["page", "command"])
def test_a_file_no_database_can_store_is_refused_whole_in_every_field(
    entry: Callable[[User, Path], Callable[[bytes], str | None]], tmp_path: Path
) -> None:
    bob = User.objects.create_user("bob")
    document = _filled(User.objects.create_user("alice"))
    send = entry(bob, tmp_path)
    before = _stored()

    failures = {}
    count = 0
    for change, data in _hostile(document):
        count += 1
        try:
            problem = send(data)
        except Exception as exc:  # noqa: BLE001 - each field's failure is collected, not the first
            problem = f"{type(exc).__name__}: {exc}"
        if problem is not None:
            failures[change] = problem

    assert failures == {}
    assert count > 200
    assert _stored() == before


def test_a_lone_surrogate_is_named_with_where_it_is() -> None:
    bob = User.objects.create_user("bob")
    document = _filled(User.objects.create_user("alice"))
    document["turns"][0]["steps"][1]["arguments"] = {f"ci{LONE}ty": "Paris"}
    client = Client()
    client.force_login(bob)

    upload = SimpleUploadedFile(
        "hostile.json", json.dumps(document).encode(), content_type="application/json"
    )
    response = client.post(reverse("inspector-conversation-import"), {"transcript": upload})

    assert response.status_code == 400
    assert "turns[0].steps[1].arguments: a key holds a lone surrogate U+D800" in response.content.decode()


def test_a_claimed_id_that_is_no_uuid_names_no_conversation_here() -> None:
    bob = User.objects.create_user("bob")
    document = _filled(User.objects.create_user("alice"))
    document["conversation"]["id"] = "not-a-uuid"
    document["conversation"]["integrity"]["key_id"] = "other"
    del document["conversation"]["integrity"]["signature"]
    client = Client()
    client.force_login(bob)

    upload = SimpleUploadedFile("probe.json", json.dumps(document).encode(), content_type="application/json")
    response = client.post(reverse("inspector-conversation-import"), {"transcript": upload})

    assert response.status_code == 302
    assert Conversation.objects.get(owner=bob).imported_meta["original_id"] == "not-a-uuid"
