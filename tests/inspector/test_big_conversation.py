"""A long conversation stays usable: older turns folded and loaded on demand, prompt diffs and
big prompts loaded when asked for, the list's count capped. Every on-demand endpoint answers
only those who may see the conversation (anyone else: 404, as for a missing one)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from conversations import selectors
from conversations.models import AuditEvent, Conversation, Step, Turn
from conversations.presentation import step_prompt_change
from conversations.selectors import ConversationFilters, conversation_page, conversation_search
from conversations.strings import common_prefix_length
from inspector import views
from inspector.fragments import render_row, render_turn, timestamp_iso
from inspector.templatetags import inspector_tags
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory, UserFactory

pytestmark = pytest.mark.django_db

HOSTILE = "<script>alert(1)</script>"


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


def page_url(conversation: Conversation) -> str:
    return reverse("inspector-conversation", args=[conversation.public_id])


def turn_url(conversation: Conversation, turn: Turn) -> str:
    return reverse("inspector-turn", args=[conversation.public_id, turn.pk])


def prompt_url(conversation: Conversation, step: Step) -> str:
    return reverse("inspector-step-prompt", args=[conversation.public_id, step.pk])


def diff_url(conversation: Conversation, step: Step) -> str:
    return reverse("inspector-step-prompt-diff", args=[conversation.public_id, step.pk])


def turn_with_rows(conversation: Conversation, rows: int, question: str = "Add them up.") -> Turn:
    """A finished turn of ``rows`` model calls, each with its raw exchange."""
    turn = TurnFactory(conversation=conversation, question=question)
    for _ in range(rows):
        ExchangeFactory(step=StepFactory(turn=turn, prompt=f"system\nuser: {question}\n"))
    return turn


# --- older turns: folded, loaded on demand -----------------------------------------------------


def test_the_page_shows_the_newest_turns_rows_and_folds_the_older_ones(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "PAGE_ROWS", 5)
    conversation = ConversationFactory(owner=alice)
    old = [turn_with_rows(conversation, 3, question=f"old question {n}") for n in range(3)]
    newer = turn_with_rows(conversation, 2, question="newer question")
    newest = turn_with_rows(conversation, 3, question="newest question")

    html = client_for(alice).get(page_url(conversation)).content.decode()

    # The newest two fit in 5 rows: rendered with their rows; the three before them are folded.
    for turn in (newer, newest):
        assert f'<section class="turn" id="turn-{turn.pk}"' in html
        for step in turn.steps.all():
            assert f'id="step-{step.pk}"' in html
    for turn in old:
        assert f'<section class="turn turn-folded" id="turn-{turn.pk}"' in html
        assert f'data-turn-url="{turn_url(conversation, turn)}"' in html
        assert f"old question {turn.seq - 1}" in html  # the question still reads in the fold
        assert not any(f'id="step-{step.pk}"' in html for step in turn.steps.all())
    assert "The 3 older turns are folded" in html
    assert html.count("3 rows") == 3


def _exchange_reads(user: User, conversation: Conversation) -> tuple[int, str]:
    with CaptureQueriesContext(connection) as queries:
        html = client_for(user).get(page_url(conversation)).content.decode()
    # Reads of exchanges (not the rows' read, which asks in a subquery whether each has one).
    reads = [
        q
        for q in queries.captured_queries
        if q["sql"].split(" FROM ", 1)[-1].startswith('"conversations_exchange"')
    ]
    return len(reads), html


def test_the_rows_of_all_shown_turns_are_read_together(alice: User) -> None:
    """The shown turns' rows, their tool calls and their exchanges are read once for the page,
    not once per turn: five short turns cost the page what two cost it."""
    conversation = ConversationFactory(owner=alice)
    turns = [turn_with_rows(conversation, 2, question=f"question {n}") for n in range(2)]
    for turn in turns:
        StepFactory(turn=turn, kind=Step.Kind.TOOL, parent=turn.steps.order_by("seq").first())
    two, _ = _exchange_reads(alice, conversation)
    turns += [turn_with_rows(conversation, 2, question=f"question {n}") for n in range(2, 5)]

    five, html = _exchange_reads(alice, conversation)

    # The exchanges of the rows and their tool calls together, and the page's count of them all.
    assert two == five == 2
    positions = [
        html.index(f'id="step-{step.pk}"')
        for turn in turns
        for step in turn.steps.order_by("seq")
        if step.parent_id is None
    ]
    assert positions == sorted(positions)  # every row, turn by turn, in order


def earlier_turns_url(conversation: Conversation, before: object) -> str:
    return reverse("inspector-turns-earlier", args=[conversation.public_id]) + f"?before={before}"


def test_the_page_lists_only_the_newest_folded_turns_and_offers_the_earlier_ones(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "PAGE_ROWS", 1)
    monkeypatch.setattr(views, "FOLDED_TURNS", 2)
    conversation = ConversationFactory(owner=alice)
    turns = [turn_with_rows(conversation, 1, question=f"question {n}") for n in range(1, 7)]

    html = client_for(alice).get(page_url(conversation)).content.decode()

    unlisted, folded, newest = turns[:3], turns[3:5], turns[5]
    assert all(f'id="step-{step.pk}"' in html for step in newest.steps.all())
    for turn in folded:
        assert f'<section class="turn turn-folded" id="turn-{turn.pk}"' in html
    for turn in unlisted:
        assert f'id="turn-{turn.pk}"' not in html
    assert f'data-before-seq="{folded[0].seq}"' in html
    assert f'data-url="{earlier_turns_url(conversation, folded[0].seq)}"' in html
    assert "3 earlier turns are not listed" in html
    assert "The 5 older turns are folded" in html
    # The control comes before the turns it stands for, so the page keeps the turns in order.
    assert html.index('class="earlier-turns"') < html.index(f'id="turn-{folded[0].pk}"')


def test_the_earlier_turns_load_folded_in_order_a_batch_at_a_time(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "EARLIER_TURNS", 2)
    conversation = ConversationFactory(owner=alice)
    turns = [turn_with_rows(conversation, 2, question=f"question {n} {HOSTILE}") for n in range(1, 6)]
    client = client_for(alice)

    html = client.get(earlier_turns_url(conversation, 4)).content.decode()

    # Turns 2 and 3, folded as the page folds them, after the control for turn 1.
    assert [f'id="turn-{turn.pk}"' in html for turn in turns] == [False, True, True, False, False]
    assert html.index(f'id="turn-{turns[1].pk}"') < html.index(f'id="turn-{turns[2].pk}"')
    assert html.count('class="turn turn-folded"') == 2 and html.count("2 rows") == 2
    assert 'data-before-seq="2"' in html and "1 earlier turn is not listed" in html
    assert html.index('class="earlier-turns"') < html.index(f'id="turn-{turns[1].pk}"')
    assert not any(f'id="step-{step.pk}"' in html for step in turns[1].steps.all())
    assert HOSTILE not in html

    last = client.get(earlier_turns_url(conversation, 2)).content.decode()

    assert f'id="turn-{turns[0].pk}"' in last and 'class="earlier-turns"' not in last


def test_the_earlier_turns_are_only_for_those_who_may_see_the_conversation(alice: User, bob: User) -> None:
    conversation = ConversationFactory(owner=alice)
    turn_with_rows(conversation, 1)
    turn_with_rows(conversation, 1)
    staff = UserFactory(username="root", is_staff=True)

    assert client_for(bob).get(earlier_turns_url(conversation, 2)).status_code == 404
    assert Client().get(earlier_turns_url(conversation, 2)).status_code == 302  # to the login page
    assert client_for(staff).get(earlier_turns_url(conversation, 2)).status_code == 200
    assert client_for(alice).get(earlier_turns_url(conversation, "x")).status_code == 400
    owner_read = client_for(alice).get(earlier_turns_url(conversation, 2))
    assert owner_read.status_code == 200 and "Turn 1" in owner_read.content.decode()


def test_the_newest_turn_is_shown_even_when_it_alone_is_over_the_page_budget(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "PAGE_ROWS", 2)
    conversation = ConversationFactory(owner=alice)
    older = turn_with_rows(conversation, 1)
    newest = turn_with_rows(conversation, 4)

    html = client_for(alice).get(page_url(conversation)).content.decode()

    assert all(f'id="step-{step.pk}"' in html for step in newest.steps.all())
    assert f'<section class="turn turn-folded" id="turn-{older.pk}"' in html


def steps_url(conversation: Conversation, turn: Turn, before: object) -> str:
    return reverse("inspector-turn-steps", args=[conversation.public_id, turn.pk]) + f"?before={before}"


def test_a_long_turn_renders_its_last_rows_and_offers_the_earlier_ones(alice: User) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = turn_with_rows(conversation, views.TURN_ROWS + 6)
    steps = list(turn.steps.order_by("seq"))

    html = client_for(alice).get(page_url(conversation)).content.decode()

    earlier, last = steps[:6], steps[6:]
    assert all(f'id="step-{step.pk}"' in html for step in last)
    assert not any(f'id="step-{step.pk}"' in html for step in earlier)
    assert f'data-before-seq="{last[0].seq}"' in html
    assert f'data-url="{steps_url(conversation, turn, last[0].seq)}"' in html
    assert "Show 6 earlier steps" in html
    # The control comes first in the rows, so the shown rows keep their order after it.
    assert html.index('class="earlier-steps"') < html.index(f'id="step-{last[0].pk}"')


def test_a_turn_only_a_little_over_the_limit_is_not_folded(alice: User) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = turn_with_rows(conversation, views.TURN_ROWS + views.TURN_FOLD_MIN - 1)

    html = client_for(alice).get(page_url(conversation)).content.decode()

    assert all(f'id="step-{step.pk}"' in html for step in turn.steps.all())
    assert 'class="earlier-steps"' not in html


def test_the_earlier_steps_load_in_order_exactly_as_the_websocket_sends_them(alice: User) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = turn_with_rows(conversation, 12, question=f"Sum? {HOSTILE}")
    steps = list(turn.steps.order_by("seq"))

    response = client_for(alice).get(steps_url(conversation, turn, steps[4].seq))

    assert response.status_code == 200
    html = response.content.decode()
    positions = []
    for step in steps[:4]:
        message = render_row(conversation=conversation, step_id=step.pk)
        assert message is not None and message["html"] in html
        positions.append(html.index(f'id="step-{step.pk}"'))
    assert positions == sorted(positions)
    assert not any(f'id="step-{step.pk}"' in html for step in steps[4:])
    assert HOSTILE not in html


def test_the_earlier_steps_are_only_for_those_who_may_see_the_conversation(alice: User, bob: User) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = turn_with_rows(conversation, 3)
    elsewhere = turn_with_rows(ConversationFactory(owner=alice), 3)
    staff = UserFactory(username="root", is_staff=True)

    assert client_for(bob).get(steps_url(conversation, turn, 3)).status_code == 404
    assert Client().get(steps_url(conversation, turn, 3)).status_code == 302  # to the login page
    assert client_for(alice).get(steps_url(conversation, elsewhere, 3)).status_code == 404
    assert client_for(staff).get(steps_url(conversation, turn, 3)).status_code == 200
    assert client_for(alice).get(steps_url(conversation, turn, "x")).status_code == 400


def test_a_folded_turn_loads_exactly_as_it_streamed(alice: User, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(views, "PAGE_ROWS", 1)
    conversation = ConversationFactory(owner=alice)
    older = turn_with_rows(conversation, 3, question=f"Which is bigger? {HOSTILE}")
    turn_with_rows(conversation, 1)

    response = client_for(alice).get(turn_url(conversation, older))

    assert response.status_code == 200
    html = response.content.decode()
    assert html.lstrip().startswith(f'<section class="turn" id="turn-{older.pk}"')
    # Each row is byte for byte the row the websocket sent; the status block is the live one too.
    for step in older.steps.all():
        message = render_row(conversation=conversation, step_id=step.pk)
        assert message is not None and message["html"] in html
    status = render_turn(conversation=conversation, turn_id=older.pk)
    assert status is not None and status["html"].split("<form")[0] in html
    assert HOSTILE not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_a_folded_turn_is_only_for_those_who_may_see_the_conversation(alice: User, bob: User) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = turn_with_rows(conversation, 1)
    elsewhere = turn_with_rows(ConversationFactory(owner=alice), 1)

    assert client_for(bob).get(turn_url(conversation, turn)).status_code == 404
    assert Client().get(turn_url(conversation, turn)).status_code == 302  # to the login page
    # A turn of another conversation, even one alice may see, is not this conversation's.
    assert client_for(alice).get(turn_url(conversation, elsewhere)).status_code == 404


def test_the_page_catches_up_from_the_newest_change_even_in_a_folded_turn(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(views, "PAGE_ROWS", 1)
    conversation = ConversationFactory(owner=alice)
    older = turn_with_rows(conversation, 2)
    turn_with_rows(conversation, 1)
    late = timezone.now() + timedelta(minutes=5)
    Step.objects.filter(turn=older).update(updated_at=late)

    html = client_for(alice).get(page_url(conversation)).content.decode()

    assert f'data-since="{timestamp_iso(late)}"' in html


def test_an_empty_conversation_catches_up_from_the_start(alice: User) -> None:
    conversation = ConversationFactory(owner=alice)

    html = client_for(alice).get(page_url(conversation)).content.decode()

    assert 'data-since="1970-01-01T00:00:00.000000+00:00"' in html


# --- the spliced prompt: the summary, the diff and the whole prompt on demand --------------------


def test_the_common_prefix_is_found_by_bisection() -> None:
    assert common_prefix_length("", "") == 0
    assert common_prefix_length("abc", "") == 0
    assert common_prefix_length("abc", "abd") == 2
    assert common_prefix_length("abc", "abcdef") == 3
    assert common_prefix_length("x" * 100_000 + "a", "x" * 100_000 + "b") == 100_000
    assert common_prefix_length("same", "same") == 4


def test_the_prompt_change_summary_cases() -> None:
    turn = TurnFactory()
    first = StepFactory(turn=turn, prompt="system\nuser: hi\n")
    grown = StepFactory(turn=turn, prompt="system\nuser: hi\ntool: 4\n")
    edited = StepFactory(turn=turn, kind=Step.Kind.ANSWER, prompt="system\nuser: HI\ntool: 4\n")
    tool = StepFactory(turn=turn, parent=grown, kind=Step.Kind.TOOL, prompt="")

    assert step_prompt_change(step=first) is None
    assert step_prompt_change(step=tool) is None
    change = step_prompt_change(step=grown)
    assert change is not None
    assert (change.same, change.appended, change.added_lines, change.delta_chars) == (False, True, 1, 8)
    change = step_prompt_change(step=edited)
    assert change is not None
    assert (change.same, change.appended, change.first_line, change.delta_chars) == (False, False, 2, 0)


def test_rows_loaded_together_summarise_their_prompts_without_fetching_the_previous_ones(
    django_assert_num_queries: object,
) -> None:
    turn = TurnFactory()
    prompts = [
        "system\nuser: hi\n",
        "",
        "system\nuser: hi\ntool: 4\n",
        "system\nuser: HI\ntool: 4\ntool: 5\n",
    ]
    for prompt in prompts:
        decide = StepFactory(turn=turn, prompt=prompt)
        StepFactory(turn=turn, parent=decide, kind=Step.Kind.TOOL, prompt="")
    StepFactory(turn=turn, kind=Step.Kind.ANSWER, prompt="system\nuser: HI\ntool: 4\ntool: 5\nanswer\n")
    top = list(Step.objects.filter(turn=turn, parent=None).order_by("seq"))
    seqs = [step.seq for step in top]
    fetched_one_by_one = [step_prompt_change(step=step) for step in top]

    for rows in (
        selectors.turn_rows(turn=turn),
        selectors.turn_rows(turn=turn, last=9),
        selectors.turn_rows(turn=turn, last=3),
        selectors.turn_rows(turn=turn, before_seq=seqs[3]),
    ):
        # Only a first row whose previous model call was not loaded with it asks the database.
        with django_assert_num_queries(0 if rows[0].seq == seqs[0] else 1):  # type: ignore[operator]
            summaries = [step_prompt_change(step=row) for row in rows]
        first = seqs.index(rows[0].seq)
        assert summaries == fetched_one_by_one[first : first + len(rows)]


def test_the_prompt_diff_is_only_for_those_who_may_see_the_conversation(alice: User, bob: User) -> None:
    turn = TurnFactory(conversation=ConversationFactory(owner=alice))
    StepFactory(turn=turn, prompt="system\nuser: hi\n")
    second = StepFactory(turn=turn, prompt=f"system\nuser: hi\ntool: {HOSTILE}\n")
    conversation = turn.conversation

    assert client_for(bob).get(diff_url(conversation, second)).status_code == 404
    assert Client().get(diff_url(conversation, second)).status_code == 302
    other = ConversationFactory(owner=alice)
    assert client_for(alice).get(diff_url(other, second)).status_code == 404  # not that one's step
    assert not AuditEvent.objects.exists()

    response = client_for(alice).get(diff_url(conversation, second))

    assert response.status_code == 200
    html = response.content.decode()
    assert '<span class="op">+</span>tool: &lt;script&gt;alert(1)&lt;/script&gt;</span>' in html
    assert HOSTILE not in html
    event = AuditEvent.objects.get()
    assert event.actor_name == "alice" and event.detail == {"via": "prompt diff", "step": second.pk}


def test_a_big_prompt_is_a_preview_and_loads_whole_on_demand(alice: User, bob: User) -> None:
    turn = TurnFactory(conversation=ConversationFactory(owner=alice))
    prompt = "system\n" + "".join(f"line {n}: {HOSTILE}\n" for n in range(4000))  # ~128 KB
    assert len(prompt.encode()) > inspector_tags.PREVIEW_THRESHOLD_BYTES
    step = StepFactory(turn=turn, prompt=prompt)
    ExchangeFactory(step=step)
    conversation = turn.conversation
    url = prompt_url(conversation, step)

    message = render_row(conversation=conversation, step_id=step.pk)
    assert message is not None
    row = message["html"]
    assert f'data-body-url="{url}?part=prompt"' in row
    assert "line 10: &lt;script&gt;" in row  # the start is shown
    assert "line 3999:" not in row  # the rest is not rendered into the page
    assert HOSTILE not in row

    assert client_for(bob).get(url).status_code == 404
    whole = client_for(alice).get(f"{url}?part=prompt")
    assert whole.status_code == 200
    assert "line 3999: &lt;script&gt;alert(1)&lt;/script&gt;" in whole.content.decode()
    assert HOSTILE not in whole.content.decode()
    raw = client_for(alice).get(f"{url}?part=prompt&raw=1")
    assert raw["Content-Type"] == "text/plain; charset=utf-8"
    assert raw.content.decode() == prompt
    # The same part read twice within a few minutes is one entry (conversations.record.audit).
    assert AuditEvent.objects.filter(detail__via="spliced prompt").count() == 1


def test_a_prompt_of_another_conversation_is_a_404(alice: User) -> None:
    step = StepFactory(turn=TurnFactory(conversation=ConversationFactory(owner=alice)), prompt="hello")
    other = ConversationFactory(owner=alice)

    assert client_for(alice).get(prompt_url(other, step)).status_code == 404


# --- the list: a capped count ------------------------------------------------------------------


def test_the_list_count_stops_at_the_cap_and_every_page_can_still_be_reached(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(selectors.search, "LIST_COUNT_CAP", 4)
    for n in range(9):
        ConversationFactory(owner=alice, title=f"c{n}")
    everything = conversation_search(user=alice, filters=ConversationFilters())

    first = conversation_page(everything, 1, per_page=2)
    assert first.paginator.count == 5 and first.paginator.capped  # type: ignore[attr-defined]
    assert first.has_next()
    # Asking for a page further on counts as far as the page after it.
    fourth = conversation_page(everything, 4, per_page=2)
    assert [c.title for c in fourth.object_list] == ["c2", "c1"]
    assert fourth.has_next() and fourth.paginator.count == 9  # type: ignore[attr-defined]
    last = conversation_page(everything, 5, per_page=2)
    assert [c.title for c in last.object_list] == ["c0"]
    assert not last.has_next() and not last.paginator.capped  # type: ignore[attr-defined]
    assert conversation_page(everything, "nonsense", per_page=2).number == 1
    assert conversation_page(everything, 99, per_page=2).number == 5

    html = client_for(alice).get(reverse("inspector-conversations")).content.decode()
    assert "9 conversations" in html  # one page of 25 counts up to 50: not capped here


def test_the_list_says_more_than_when_capped(alice: User, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(selectors.search, "LIST_COUNT_CAP", 30)
    for n in range(60):
        ConversationFactory(owner=alice, title=f"c{n}")

    html = client_for(alice).get(reverse("inspector-conversations")).content.decode()

    assert "more than 50 conversations" in html
    assert "page 1 of at least 3" in html


def test_the_turn_count_is_still_every_turn(alice: User) -> None:
    conversation = ConversationFactory(owner=alice)
    TurnFactory(conversation=conversation)
    TurnFactory(conversation=conversation)
    empty = ConversationFactory(owner=alice)

    counts = {c.pk: c.turn_count for c in selectors.conversation_list(user=alice)}

    assert counts == {conversation.pk: 2, empty.pk: 0}


# Digits Python's str.isdigit accepts but int() refuses, a number past any turn or step and
# past int()'s digit limit, a sign, a space: each is a clear 400, never a server error.
HOSTILE_NUMBERS = ["²", "٣" * 19, "9" * 5000, "-1", " 1", "1.0", "", "9" * 19]


@pytest.mark.parametrize("raw", HOSTILE_NUMBERS)
def test_a_hostile_before_is_a_clear_400_on_both_on_demand_loads(alice: User, raw: str) -> None:
    conversation = ConversationFactory(owner=alice)
    turn = turn_with_rows(conversation, 2)
    client = client_for(alice)

    for url in (earlier_turns_url(conversation, raw), steps_url(conversation, turn, raw)):
        response = client.get(url)
        assert response.status_code == 400, (url, response.status_code)
        assert "must be a" in response.content.decode()
