"""The audit features of the conversation page: big payloads previewed and loaded on demand,
downloads (json, jsonl, otel), uploads of transcripts, the hash-chain badge and replays — each
behind the one access rule, each read written to the audit log."""

from __future__ import annotations

import json
from typing import Any

import pytest
from django.contrib.auth.models import User
from django.core.files.uploadedfile import SimpleUploadedFile
from django.template.loader import render_to_string
from django.test import Client
from django.urls import reverse

from conversations.models import AuditEvent, Conversation, Exchange, Team, Turn
from conversations.record.integrity import GENESIS, exchange_digest, turn_seal
from conversations.record.transcripts.export import (
    BINARY_FORMATS,
    EXPORT_FORMATS,
    MEDIA_TYPES,
    transcript_export,
    transcript_export_bytes,
)
from inspector import forms, views
from inspector.fragments import render_row
from inspector.templatetags.inspector_tags import PREVIEW_CHARS, PREVIEW_THRESHOLD_BYTES
from tests.factories import (
    ConversationFactory,
    ExchangeFactory,
    McpServerFactory,
    ModelProfileFactory,
    StepFactory,
    TurnFactory,
    UserFactory,
)

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert('owned')</script>"


@pytest.fixture
def alice() -> User:
    return UserFactory(username="alice")


@pytest.fixture
def bob() -> User:
    return UserFactory(username="bob")


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def seal(conversation: Conversation) -> None:
    """Give factory-made exchanges the hash chain the recorder would have written."""
    previous = GENESIS
    rows = Exchange.objects.filter(turn__conversation=conversation).select_related("turn")
    for exchange in rows.order_by("turn__seq", "seq", "id"):
        assert exchange.turn is not None
        exchange.prev_hash = previous
        exchange.hash = exchange_digest(exchange, turn_seq=exchange.turn.seq, previous=previous)
        exchange.save(update_fields=["prev_hash", "hash"])
        previous = exchange.hash
    for turn in conversation.turns.all():
        if turn.is_finished:
            turn_seal(turn=turn)


def recorded(owner: User, *, title: str = "Weather in Paris") -> Conversation:
    """A finished conversation with a model call and a tool call on the wire, chain sealed."""
    conversation = ConversationFactory(owner=owner, title=title)
    turn = TurnFactory(conversation=conversation, question="What is the weather in Paris tomorrow?")
    decide = StepFactory(turn=turn, title="calls get_forecast")
    ExchangeFactory(step=decide)
    tool = StepFactory(
        turn=turn, parent=decide, kind="tool", title="demo/get_forecast", tool_name="get_forecast"
    )
    ExchangeFactory(step=tool, mcp=True)
    seal(conversation)
    return conversation


def page_url(conversation: Conversation) -> str:
    return reverse("inspector-conversation", args=[conversation.public_id])


def body_url(conversation: Conversation, exchange: Exchange) -> str:
    return reverse("inspector-exchange-body", args=[conversation.public_id, exchange.pk])


def export_url(conversation: Conversation) -> str:
    return reverse("inspector-conversation-export", args=[conversation.public_id])


def big_json(marker: str) -> str:
    """A JSON body well over the preview threshold whose last item is ``marker``."""
    items = [{"n": n, "text": f"line {n} of a long tool result"} for n in range(3000)]
    return json.dumps({"result": {"items": items, "last": marker}})


# --- big payloads ----------------------------------------------------------------------------


def test_a_big_body_is_previewed_with_a_button_that_loads_the_rest(alice: User) -> None:
    conversation = recorded(alice)
    body = big_json("THE-VERY-END")
    assert len(body) > PREVIEW_THRESHOLD_BYTES
    exchange = ExchangeFactory(step=StepFactory(turn=conversation.turns.get()), mcp=True, response_body=body)

    html = client_for(alice).get(page_url(conversation)).content.decode()

    assert 'class="payload payload-preview"' in html
    assert "Load the full body" in html
    assert f'data-body-url="{body_url(conversation, exchange)}?part=response"' in html
    assert "line 5 of a long tool result" in html
    assert "THE-VERY-END" not in html
    assert f"Showing the first {PREVIEW_CHARS // 1024}.0\xa0KB of" in html


def test_a_small_body_is_shown_whole_without_a_preview(alice: User) -> None:
    conversation = recorded(alice)

    html = client_for(alice).get(page_url(conversation)).content.decode()

    assert "payload-preview" not in html and "Load the full body" not in html


def test_the_full_body_view_returns_the_whole_body_highlighted_and_audits_the_read(alice: User) -> None:
    conversation = recorded(alice)
    exchange = ExchangeFactory(
        step=StepFactory(turn=conversation.turns.get()), mcp=True, response_body=big_json("THE-VERY-END")
    )

    response = client_for(alice).get(body_url(conversation, exchange), {"part": "response"})

    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith('<pre tabindex="0" class="body hl">')
    assert "THE-VERY-END" in html
    event = AuditEvent.objects.get(action="opened", detail__via="exchange body")
    assert event.actor_name == "alice" and event.conversation_public_id == conversation.public_id
    assert event.detail == {"via": "exchange body", "exchange": exchange.pk, "part": "response"}


def test_the_raw_body_is_the_exact_stored_text_as_plain_text(alice: User) -> None:
    conversation = recorded(alice)
    exchange = ExchangeFactory(step=StepFactory(turn=conversation.turns.get()), request_body=HOSTILE * 3)

    response = client_for(alice).get(body_url(conversation, exchange), {"part": "request", "raw": "1"})

    assert response["Content-Type"] == "text/plain; charset=utf-8"
    assert response["X-Content-Type-Options"] == "nosniff"
    assert response.content.decode() == HOSTILE * 3


def test_a_hostile_big_body_is_escaped_in_the_preview_and_in_the_full_view(alice: User) -> None:
    conversation = recorded(alice)
    body = (HOSTILE + "\n") * 5000
    exchange = ExchangeFactory(step=StepFactory(turn=conversation.turns.get()), response_body=body)
    client = client_for(alice)

    page = client.get(page_url(conversation)).content.decode()
    full = client.get(body_url(conversation, exchange), {"part": "response"}).content.decode()

    for html in (page, full):
        assert "<script>alert" not in html
        assert "&lt;script&gt;alert(&#x27;owned&#x27;)&lt;/script&gt;" in html


def test_the_full_body_is_a_404_for_bob_and_for_another_conversations_exchange(
    alice: User, bob: User
) -> None:
    conversation = recorded(alice)
    exchange = Exchange.objects.filter(turn__conversation=conversation).first()
    assert exchange is not None
    bobs = recorded(bob, title="Bob's")

    assert client_for(bob).get(body_url(conversation, exchange), {"part": "response"}).status_code == 404
    assert client_for(bob).get(body_url(bobs, exchange), {"part": "response"}).status_code == 404
    assert not AuditEvent.objects.filter(actor_name="bob").exists()


def test_the_full_body_needs_a_known_part(alice: User) -> None:
    conversation = recorded(alice)
    exchange = Exchange.objects.filter(turn__conversation=conversation).first()
    assert exchange is not None

    response = client_for(alice).get(body_url(conversation, exchange), {"part": "headers"})

    assert response.status_code == 400


def test_a_live_row_and_a_lone_exchange_fragment_carry_the_same_load_url(alice: User) -> None:
    conversation = recorded(alice)
    step = StepFactory(turn=conversation.turns.get())
    exchange = ExchangeFactory(step=step, mcp=True, response_body=big_json("END"))
    url = f"{body_url(conversation, exchange)}?part=response"

    row = render_row(conversation=conversation, step_id=step.pk)
    alone = render_to_string("inspector/_exchange.html", {"exchange": exchange})

    assert row is not None and f'data-body-url="{url}"' in row["html"]
    assert f'data-body-url="{url}"' in alone


# --- download --------------------------------------------------------------------------------


@pytest.mark.parametrize("fmt", EXPORT_FORMATS)
def test_each_download_is_an_attachment_of_the_export_and_is_audited(alice: User, fmt: Any) -> None:
    conversation = recorded(alice)

    response = client_for(alice).get(export_url(conversation), {"format": fmt})

    assert response.status_code == 200
    charset = "" if fmt in BINARY_FORMATS else "; charset=utf-8"
    assert response["Content-Type"] == f"{MEDIA_TYPES[fmt]}{charset}"
    assert response["Content-Disposition"].startswith(
        f'attachment; filename="conversation-{conversation.public_id}.'
    )
    assert response.content == transcript_export_bytes(conversation=conversation, fmt=fmt)
    event = AuditEvent.objects.get(action="exported")
    assert (event.actor_name, event.conversation_public_id) == ("alice", conversation.public_id)
    assert event.detail["format"] == fmt and event.detail["via"] == "page"


def test_the_page_offers_every_download(alice: User) -> None:
    conversation = recorded(alice)

    html = client_for(alice).get(page_url(conversation)).content.decode()

    for fmt in EXPORT_FORMATS:
        assert f'href="{export_url(conversation)}?format={fmt}"' in html


def test_a_download_is_a_404_for_bob_and_not_audited(alice: User, bob: User) -> None:
    conversation = recorded(alice)

    assert client_for(bob).get(export_url(conversation), {"format": "json"}).status_code == 404
    assert not AuditEvent.objects.filter(action="exported").exists()


def test_a_team_mate_may_download(alice: User, bob: User) -> None:
    Team.objects.create(name="platform").members.add(alice, bob)
    conversation = recorded(alice)

    assert client_for(bob).get(export_url(conversation), {"format": "jsonl"}).status_code == 200


def test_an_unknown_download_format_is_a_400(alice: User) -> None:
    conversation = recorded(alice)

    response = client_for(alice).get(export_url(conversation), {"format": "xml"})

    assert response.status_code == 400
    assert "json, jsonl, otel, otlp" in response.content.decode()


# --- upload ----------------------------------------------------------------------------------

IMPORT_URL = reverse("inspector-conversation-import")


def upload(user: User, content: bytes, name: str = "transcript.json") -> Any:
    return client_for(user).post(IMPORT_URL, {"transcript": SimpleUploadedFile(name, content)})


def test_an_uploaded_transcript_becomes_a_read_only_conversation(alice: User, bob: User) -> None:
    original = recorded(alice, title=f"Weather {HOSTILE}")
    exported = transcript_export(conversation=original, fmt="json").encode()

    response = upload(bob, exported, name="paris.json")

    imported = Conversation.objects.exclude(pk=original.pk).get()
    assert response.status_code == 302 and response["Location"] == page_url(imported)
    assert imported.owner == bob and imported.read_only
    event = AuditEvent.objects.get(action="imported")
    assert event.actor_name == "bob" and event.conversation_public_id == imported.public_id
    assert event.detail["original_id"] == str(original.public_id) and event.detail["from"] == "paris.json"

    html = client_for(bob).get(page_url(imported)).content.decode()
    assert "Read-only" in html and f"as conversation <code>{original.public_id}</code>" in html
    assert "imported by bob from a file claiming to be recorded by alice" in html
    assert "verified with this installation&#x27;s key" in html
    assert 'id="follow-up"' not in html
    assert "<script>alert" not in html
    assert "record intact (2 exchanges)" in client_for(bob).get(chain_url(imported)).content.decode()


def test_a_file_that_is_not_a_transcript_is_a_400_that_says_why(alice: User) -> None:
    response = upload(alice, b'{"hello": "world"}')

    assert response.status_code == 400
    html = response.content.decode()
    assert "This file cannot be imported: not a Tool-Call Inspector transcript" in html
    assert not Conversation.objects.exists()


def test_a_tampered_transcript_is_refused(alice: User) -> None:
    document = json.loads(transcript_export(conversation=recorded(alice), fmt="json"))
    document["turns"][0]["steps"][0]["exchanges"][0]["response_body"] = '{"forged": true}'

    response = upload(alice, json.dumps(document).encode())

    assert response.status_code == 400
    assert "the hash chain does not verify" in response.content.decode()
    assert Conversation.objects.count() == 1


def test_a_file_over_the_size_limit_is_refused_before_reading_it(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(forms, "TRANSCRIPT_UPLOAD_MAX_BYTES", 1000)

    response = upload(alice, b" " * 1001)

    assert response.status_code == 400
    assert "at most 1000" in response.content.decode()
    assert "manage.py import" in response.content.decode()


def test_an_upload_without_a_file_is_a_400(alice: User) -> None:
    response = client_for(alice).post(IMPORT_URL, {})

    assert response.status_code == 400
    assert "This field is required." in response.content.decode()


# --- the hash-chain badge --------------------------------------------------------------------


def chain_url(conversation: Conversation) -> str:
    return reverse("inspector-conversation-chain", args=[conversation.public_id])


def test_the_page_loads_the_badge_after_it_has_painted(alice: User) -> None:
    conversation = recorded(alice)

    html = client_for(alice).get(page_url(conversation)).content.decode()

    # Verifying re-hashes every exchange: the page names where the verdict comes from instead.
    assert f'data-chain-url="{chain_url(conversation)}" data-auto="1"' in html
    assert "record intact" not in html


def test_a_long_record_is_verified_on_request_only(alice: User, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(views, "CHAIN_AUTO_EXCHANGES", 1)
    conversation = recorded(alice)

    html = client_for(alice).get(page_url(conversation)).content.decode()

    assert f'data-chain-url="{chain_url(conversation)}" role="status">' in html  # no data-auto
    assert "Verify the record (2 exchanges)</button>" in html
    assert "record intact (2 exchanges)" in client_for(alice).get(chain_url(conversation)).content.decode()


def test_the_badge_says_the_record_is_intact(alice: User) -> None:
    conversation = recorded(alice)

    html = client_for(alice).get(chain_url(conversation)).content.decode()

    assert "record intact (2 exchanges)" in html


def test_the_badge_is_only_for_those_who_may_see_the_conversation(alice: User, bob: User) -> None:
    conversation = recorded(alice)

    assert client_for(bob).get(chain_url(conversation)).status_code == 404
    assert Client().get(chain_url(conversation)).status_code == 302  # to the login page


def test_the_badge_names_the_first_broken_record_after_a_direct_edit(alice: User) -> None:
    conversation = recorded(alice)
    first = Exchange.objects.filter(turn__conversation=conversation).order_by("seq", "id").first()
    assert first is not None
    Exchange.objects.filter(pk=first.pk).update(response_body='{"edited": "afterwards"}')

    html = client_for(alice).get(chain_url(conversation)).content.decode()

    assert f"record BROKEN at exchange #{first.pk}: its content does not match its hash" in html
    assert f'href="#exchange-{first.pk}"' in html


# --- replays (the run itself: tests/conversations/test_replay.py) ----------------------------


def replay_url(turn: Turn) -> str:
    return reverse("inspector-turn-replay", args=[turn.conversation.public_id, turn.pk])


def test_replaying_a_turn_starts_a_replay_conversation_and_opens_it(
    alice: User, django_capture_on_commit_callbacks: Any
) -> None:
    server = McpServerFactory(name="demo")
    conversation = ConversationFactory(owner=alice, title="Weather", paradigm="prompt_xml", servers=[server])
    turn = TurnFactory(conversation=conversation, tool_choice="required")

    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        response = client_for(alice).post(replay_url(turn))

    replay = Conversation.objects.get(replay_of=turn)
    assert response.status_code == 302 and response["Location"] == page_url(replay)
    assert (replay.owner, replay.model_profile, replay.paradigm, replay.tool_choice) == (
        alice,
        conversation.model_profile,
        "prompt_xml",
        "required",
    )
    assert list(replay.servers.all()) == [server]
    assert replay.title == "Replay of “Weather”"
    assert [t.question for t in replay.turns.all()] == [turn.question]
    assert len(callbacks) == 1


def test_the_page_offers_a_replay_of_each_finished_turn_only(alice: User) -> None:
    conversation = ConversationFactory(owner=alice)
    done = TurnFactory(conversation=conversation)
    running = TurnFactory(conversation=conversation, status="running")

    html = client_for(alice).get(page_url(conversation)).content.decode()

    assert f'action="{replay_url(done)}"' in html
    assert f'action="{replay_url(running)}"' not in html


def test_bob_cannot_replay_alices_turn(alice: User, bob: User) -> None:
    turn = TurnFactory(conversation=ConversationFactory(owner=alice))

    assert client_for(bob).post(replay_url(turn)).status_code == 404
    assert not Conversation.objects.filter(replay_of=turn).exists()


def test_a_running_turn_cannot_be_replayed_yet(alice: User) -> None:
    turn = TurnFactory(conversation=ConversationFactory(owner=alice), status="running")

    response = client_for(alice).post(replay_url(turn))

    assert response.status_code == 409
    assert "cannot be replayed: this turn has not finished yet" in response.content.decode()


def test_an_imported_conversation_without_a_model_here_cannot_be_replayed(alice: User) -> None:
    placeholder = ModelProfileFactory(name="imported: gpt-elsewhere", base_url="", api_key_env="")
    imported = ConversationFactory(
        owner=alice, model_profile=placeholder, imported_meta={"original_id": "x", "servers": []}
    )
    turn = TurnFactory(conversation=imported)

    response = client_for(alice).post(replay_url(turn))

    assert response.status_code == 409
    assert "its model profile “gpt-elsewhere” is not set up here" in response.content.decode()


def test_an_imported_conversation_replays_against_local_servers_of_the_same_names(
    alice: User, django_capture_on_commit_callbacks: Any
) -> None:
    demo = McpServerFactory(name="demo")
    imported = ConversationFactory(
        owner=alice, imported_meta={"original_id": "x", "servers": [{"name": "demo", "transport": "stdio"}]}
    )
    turn = TurnFactory(conversation=imported)

    with django_capture_on_commit_callbacks(execute=False):
        response = client_for(alice).post(replay_url(turn))

    assert response.status_code == 302
    assert list(Conversation.objects.get(replay_of=turn).servers.all()) == [demo]


def test_an_imported_conversation_naming_a_server_unknown_here_cannot_be_replayed(alice: User) -> None:
    imported = ConversationFactory(
        owner=alice,
        imported_meta={"original_id": "x", "servers": [{"name": "elsewhere", "transport": "http"}]},
    )

    response = client_for(alice).post(replay_url(TurnFactory(conversation=imported)))

    assert response.status_code == 409
    assert "not set up (or not enabled) here: elsewhere" in response.content.decode()


def test_a_replay_page_links_to_the_original_and_waits_for_the_run(alice: User) -> None:
    original = TurnFactory(conversation=ConversationFactory(owner=alice, title="Weather"))
    replay = ConversationFactory(owner=alice, replay_of=original, title="Replay of “Weather”")
    TurnFactory(conversation=replay, status="running")

    html = client_for(alice).get(page_url(replay)).content.decode()

    assert "Differences from the original turn" in html
    assert f'href="{page_url(original.conversation)}#turn-{original.pk}"' in html
    assert "The replay has not finished yet" in html


def test_a_replay_never_shows_an_original_its_viewer_may_not_open(alice: User, bob: User) -> None:
    carol = UserFactory(username="carol")
    Team.objects.create(name="bob and carol").members.add(bob, carol)
    original = TurnFactory(
        conversation=ConversationFactory(owner=alice, title="Alice's private weather"), answer="SECRET-ANSWER"
    )
    replay = ConversationFactory(owner=bob, replay_of=original, title="Bob's replay")
    TurnFactory(conversation=replay)

    html = client_for(carol).get(page_url(replay)).content.decode()

    assert "a conversation you cannot open" in html
    assert "SECRET-ANSWER" not in html and "Alice&#x27;s private weather" not in html
