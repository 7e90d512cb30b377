"""A turn of thousands of tool calls (a model reply that asked for 10,000 with the limits raised,
an imported trace, an old record) or of thousands of rows stays usable: its page shows the first
and last calls and rows and loads the rest on request, a batch at a time, through fragment
endpoints only the conversation's readers reach; no page is more than a few hundred kB, and a
text too long to show is cut for display, marked, while the record keeps it whole.

Page sizes are asserted (bytes of HTML), never times.
"""

from __future__ import annotations

import json
import re
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.core.management.color import no_style
from django.test import Client
from django.urls import reverse
from django.utils import timezone
from pytest_django.fixtures import Settings

from bench.huge_turn import huge_turn_build
from conversations import selectors
from conversations.models import Conversation, Step, Turn
from conversations.record.transcripts.importing import TranscriptError, transcript_import
from inspector import api, views
from inspector.fragments import render_catch_up, render_row
from inspector.management.commands import ask
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory, UserFactory

pytestmark = pytest.mark.django_db

CALLS = 10_000
# What a page of any turn may weigh at most: a few hundred kB (the 10,000-call turn's page
# was 50 MB before its calls were cut).
PAGE_LIMIT = 500_000


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


def page_of(user: User, conversation: Conversation) -> str:
    response = client_for(user).get(reverse("inspector-conversation", args=[conversation.public_id]))
    assert response.status_code == 200
    return response.content.decode()


def decision_of(turn: Turn) -> Step:
    return Step.objects.get(turn=turn, kind=Step.Kind.DECIDE)


def tool_ids(turn: Turn) -> list[int]:
    return list(decision_of(turn).children.order_by("seq").values_list("pk", flat=True))


def controls(html: str, part: str) -> list[str]:
    return re.findall(rf'class="more-calls" data-part="{part}"[^>]*data-url="([^"]+)"', html)


def test_a_reply_of_ten_thousand_calls_makes_a_page_of_a_few_hundred_kb_with_its_first_and_last_calls(
    alice: User,
) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = huge_turn_build(conversation=conversation, calls=CALLS)
    ids = tool_ids(turn)

    html = page_of(alice, conversation)

    assert len(html.encode()) < PAGE_LIMIT, len(html.encode())
    head, tail = selectors.CALLS_HEAD, selectors.CALLS_TAIL
    shown = [pk for pk in ids if f'id="tool-step-{pk}"' in html]
    assert shown == ids[:head] + ids[-tail:]
    assert html.count('class="tool-call ') == head + tail
    # The parsed calls too: the first few and the last few, by their call ids.
    assert "call id <code>call_0</code>" in html and f"call id <code>call_{CALLS - 1}</code>" in html
    assert "call id <code>call_5000</code>" not in html
    gap = CALLS - head - tail
    assert f'<span class="calls-left">{gap}</span> more tool calls of this reply (of {CALLS})' in html
    assert f'<span class="calls-left">{gap}</span> more parsed calls of this reply (of {CALLS})' in html
    # The timeline draws its first and last bars and says how many it left out.
    assert "more calls not drawn" in html and html.count("<rect x=") < 100
    # The final answer, after the calls, is on the page.
    assert 'id="step-' + str(Step.objects.get(turn=turn, kind="answer").pk) + '"' in html


def test_the_live_row_of_a_huge_reply_is_bounded_and_shows_a_new_call_at_its_end(alice: User) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = huge_turn_build(conversation=conversation, calls=2_000)
    decide = decision_of(turn)
    before = render_row(conversation=conversation, step_id=decide.pk)
    assert before is not None and len(before["html"]) < PAGE_LIMIT

    # The turn runs on: one more call of the reply is recorded (a real turn would then publish
    # the row's id); the row the socket sends, and the one a reconnect catches up, show it last.
    mark = timezone.now()
    new = StepFactory(
        turn=turn,
        parent=decide,
        seq=Step.objects.filter(turn=turn).count() + 10,
        kind=Step.Kind.TOOL,
        title="late/call",
    )
    Step.objects.filter(pk=decide.pk).update(updated_at=timezone.now() + timedelta(seconds=1))
    row = render_row(conversation=conversation, step_id=decide.pk)
    assert row is not None and f'id="tool-step-{new.pk}"' in row["html"]
    assert row["html"].index(f'id="tool-step-{new.pk}"') > row["html"].index(
        'class="more-calls" data-part="tools"'
    )
    assert "2000 more tool calls" not in row["html"] and "1991" in row["html"]
    caught = render_catch_up(conversation=conversation, since=mark)
    rows = [message for message in caught if message["type"] == "row" and message["step_id"] == decide.pk]
    assert len(rows) == 1 and f'id="tool-step-{new.pk}"' in rows[0]["html"]


def test_load_more_fetches_the_middle_calls_a_batch_at_a_time_until_every_call_was_shown_once(
    alice: User,
) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = huge_turn_build(conversation=conversation, calls=250)
    ids = tool_ids(turn)
    client = client_for(alice)
    html = page_of(alice, conversation)
    seen = [pk for pk in ids if f'id="tool-step-{pk}"' in html]
    parsed_seen = re.findall(r"call id <code>(call_\d+)</code>", html)

    for part in ("tools", "parsed"):
        urls = controls(html, part)
        loads = 0
        while urls:
            (url,) = urls
            response = client.get(url.replace("&amp;", "&"))
            assert response.status_code == 200
            batch = response.content.decode()
            assert len(batch.encode()) < PAGE_LIMIT
            if part == "tools":
                seen += [int(pk) for pk in re.findall(r'id="tool-step-(\d+)"', batch)]
            else:
                parsed_seen += re.findall(r"call id <code>(call_\d+)</code>", batch)
            urls = controls(batch, part)
            loads += 1
        assert loads == 3  # 240 between the first and last five: 100, 100, 40

    assert sorted(seen) == ids and len(seen) == len(set(seen))
    assert sorted(parsed_seen, key=lambda name: int(name[5:])) == [f"call_{n}" for n in range(250)]


def test_the_row_calls_endpoint_answers_only_the_conversations_readers(alice: User, bob: User) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = huge_turn_build(conversation=conversation, calls=40)
    decide = decision_of(turn)
    url = reverse("inspector-step-calls", args=[conversation.public_id, decide.pk])
    tool = decide.children.first()
    assert tool is not None

    assert client_for(bob).get(f"{url}?part=tools&start=5&stop=35").status_code == 404
    assert client_for(bob).get(f"{url}?part=parsed&start=5&stop=35").status_code == 404
    assert client_for(bob).get(url).status_code == 404
    mine = client_for(alice)
    assert mine.get(f"{url}?part=tools&start=5&stop=35").status_code == 200
    assert mine.get(f"{url}?part=nothing&start=5&stop=35").status_code == 400
    assert mine.get(f"{url}?part=tools&start=9&stop=3").status_code == 400
    # A tool call is no row: its calls are not asked for on their own.
    child_url = reverse("inspector-step-calls", args=[conversation.public_id, tool.pk])
    assert mine.get(f"{child_url}?part=tools&start=0&stop=1").status_code == 404


def turn_of_rows(conversation: Conversation, rows: int) -> Turn:
    turn = TurnFactory(conversation=conversation)
    Step.objects.bulk_create(
        [
            Step(turn=turn, seq=n, kind=Step.Kind.DECIDE, status=Step.Status.OK, title=f"decision number {n}")
            for n in range(1, rows + 1)
        ]
    )
    return turn


def test_a_turn_of_a_thousand_rows_loads_its_earlier_rows_a_batch_at_a_time(alice: User, bob: User) -> None:
    conversation = ConversationFactory(owner=alice)
    turn_of_rows(conversation, 1_000)
    html = page_of(alice, conversation)
    assert len(html.encode()) < PAGE_LIMIT
    assert html.count('<section class="step ') == views.TURN_ROWS
    left = 1_000 - views.TURN_ROWS
    assert f"{left} earlier steps of this turn are not shown" in html
    assert f"Show the {selectors.ROWS_BATCH} before" in html

    url = re.search(r'class="earlier-steps" data-before-seq="\d+" data-url="([^"]+)"', html)
    assert url is not None
    response = client_for(alice).get(url.group(1))
    batch = response.content.decode()
    seqs = [
        int(seq) for seq in re.findall(r'<section class="step [^"]*" id="step-\d+" data-seq="(\d+)"', batch)
    ]
    assert seqs == list(range(left - selectors.ROWS_BATCH + 1, left + 1))
    assert f"{left - selectors.ROWS_BATCH} earlier steps of this turn are not shown" in batch
    assert batch.index('class="earlier-steps"') < batch.index('<section class="step ')
    assert client_for(bob).get(url.group(1)).status_code == 404


def test_an_answer_and_arguments_past_the_display_limit_are_cut_and_marked_and_the_record_keeps_them(
    alice: User, settings: Settings
) -> None:
    settings.DISPLAY_MAX_CHARS = 1_000
    conversation = ConversationFactory(owner=alice)
    answer = "Sunny. " + "x" * 300_000 + " THE-END"
    turn = TurnFactory(conversation=conversation, answer=answer)
    argument = "y" * 50_000 + "ARG-END"
    decide = StepFactory(
        turn=turn, calls=[{"id": "c1", "name": "echo", "arguments": {"text": argument}, "valid": True}]
    )
    ExchangeFactory(step=decide, response_body='{"text": "' + "z" * 200_000 + '"}')
    StepFactory(turn=turn, kind=Step.Kind.ANSWER, text=answer)

    html = page_of(alice, conversation)

    assert len(html.encode()) < 100_000
    assert "THE-END" not in html and "ARG-END" not in html
    assert (
        html.count("Cut for display after 1,000 of 300,015 characters") == 2
    )  # the turn's answer, the step's
    assert f"of {len(json.dumps({'text': argument})):,} characters" in html  # the call's arguments, as JSON
    export = reverse("inspector-conversation-export", args=[conversation.public_id])
    assert f'href="{export}?format=json" download' in html
    # The raw body past the display limit is not offered whole in the page: its raw link is.
    assert "Too big to show here" in html
    turn.refresh_from_db()
    assert turn.answer == answer


# --- the REST API -------------------------------------------------------------------------------


def test_the_api_gives_a_huge_turns_steps_in_pages_and_a_small_turn_whole(alice: User, bob: User) -> None:
    conversation = ConversationFactory(owner=alice)
    small = TurnFactory(conversation=conversation)
    StepFactory(turn=small)
    huge = huge_turn_build(conversation=conversation, calls=1_200)
    client = client_for(alice)

    response = client.get(reverse("api-conversation", args=[conversation.public_id]))
    assert response.status_code == 200
    document = response.json()
    first, second = document["turns"]
    assert "steps_count" not in first and "steps_next" not in first and len(first["steps"]) == 1
    assert len(second["steps"]) == api.API_STEPS_PAGE and second["steps_count"] == 1_203
    seen = [step["seq"] for step in second["steps"]]
    # Each step of the page keeps its exchanges; the steps after it are not in the answer.
    assert all(len(step["exchanges"]) == 1 for step in second["steps"][2:])

    url = second["steps_next"]
    pages = 0
    while url:
        page = client.get(url)
        assert page.status_code == 200
        assert client_for(bob).get(url).status_code == 404
        body = page.json()
        assert body["turn"] == huge.pk and body["steps_count"] == 1_203
        seen += [step["seq"] for step in body["steps"]]
        url = body["next"]
        pages += 1
    assert pages == 2 and seen == list(range(1, 1_204))
    steps = reverse("api-turn-steps", args=[huge.pk])
    assert client.get(f"{steps}?after=x").status_code == 400
    assert client_for(bob).get(steps).status_code == 404
    assert Client().get(steps).status_code == 401
    # The export stays whole.
    export = client.get(reverse("inspector-conversation-export", args=[conversation.public_id]))
    assert len(json.loads(export.content)["turns"][1]["steps"]) == 1_203


def test_an_api_answer_in_pages_is_refused_by_the_import(alice: User) -> None:
    conversation = ConversationFactory(owner=alice)
    huge_turn_build(conversation=conversation, calls=600)
    client = client_for(alice)
    paged = client.get(reverse("api-conversation", args=[conversation.public_id])).content

    with pytest.raises(TranscriptError, match="holds 500 of its 603 steps"):
        transcript_import(data=paged, owner=alice)


# --- the step-through and manage.py ask ---------------------------------------------------------


def test_the_step_through_of_a_reply_of_ten_thousand_calls_shows_its_first_and_last_calls_and_counts_the_rest(
    alice: User, bob: User
) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = huge_turn_build(conversation=conversation, calls=CALLS)
    url = reverse("inspector-turn-walk", args=[conversation.public_id, turn.pk])
    client = client_for(alice)

    first = client.get(url).content.decode()
    found = re.search(r"slide 1 of (\d+)", first)
    assert found is not None
    total = int(found.group(1))
    # The connect row, the decision's 4 layers, 10 calls of 2 slides and the one that counts the
    # rest, the answer's 4: the deck of a reply of 10,000 calls is as long as one of 10.
    assert total == 1 + 4 + 2 * (selectors.CALLS_HEAD + selectors.CALLS_TAIL) + 1 + 4
    slides = []
    for at in range(1, total + 1):
        response = client.get(url, {"at": at})
        assert response.status_code == 200
        assert len(response.content) < 100_000, (at, len(response.content))
        slides.append(response.content.decode())
    executed = [slide for slide in slides if 'class="mark-execute"' in slide]
    numbers = [int(n) for slide in executed for n in re.findall(r"&quot;n&quot;: (\d+)", slide)]
    assert numbers == [*range(selectors.CALLS_HEAD), *range(CALLS - selectors.CALLS_TAIL, CALLS)]
    gap = CALLS - selectors.CALLS_HEAD - selectors.CALLS_TAIL
    [between] = [slide for slide in slides if f"{gap:,} more tool calls of this reply" in slide]
    assert f"This reply asked for {CALLS:,} tool calls" in between
    assert slides.index(between) == slides.index(executed[selectors.CALLS_HEAD - 1]) + 2
    [parsed] = [slide for slide in slides if 'data-layer="parsed"' in slide]
    assert f"{gap:,} more calls of this reply (of {CALLS:,})" in parsed
    assert "&quot;n&quot;: 0" in parsed and f"&quot;n&quot;: {CALLS - 1}" in parsed
    assert "&quot;n&quot;: 5000" not in parsed
    assert client_for(bob).get(url).status_code == 404


def test_ask_prints_a_reply_of_ten_thousand_calls_as_its_first_and_last_and_a_count(alice: User) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = huge_turn_build(conversation=conversation, calls=CALLS)
    gap = CALLS - selectors.CALLS_HEAD - selectors.CALLS_TAIL

    text = "\n".join(ask.turn_report(conversation=conversation, turn=turn, style=no_style()))

    assert len(text) < 20_000, len(text)
    assert (
        len(re.findall(r"^    \[\d+\] tool ", text, re.MULTILINE))
        == selectors.CALLS_HEAD + selectors.CALLS_TAIL
    )
    steps = reverse("api-turn-steps", args=[turn.pk])
    assert f"… {gap:,} more tool calls of this reply (of {CALLS:,}): " in text and f"{steps}?after=0" in text
    assert f"… {gap:,} more calls of this reply (of {CALLS:,})" in text
    # The arguments' keys in any order (PostgreSQL's jsonb keeps its own).
    numbers = {int(n) for n in re.findall(r'"n": (\d+)[,}]', text)}
    assert numbers == {*range(selectors.CALLS_HEAD), *range(CALLS - selectors.CALLS_TAIL, CALLS)}
    assert f"Answer: {turn.answer}" in text

    # --json: the API's answer, the first page of steps and where the rest is.
    [document] = json.loads(ask.turn_json(conversation=conversation))["turns"]
    assert len(document["steps"]) == api.API_STEPS_PAGE
    assert document["steps_count"] == CALLS + 3
    assert document["steps_next"] == f"{steps}?after={api.API_STEPS_PAGE}"
