"""The step-through of a turn of thousands of rows reads a page of rows at a time
(``inspector.walkthrough.ROWS_PAGE``, docs/decisions/0130): the page of the slide on screen,
never the whole turn; and stepping still walks every row's slides in order, across pages, both
ways, showing each slide exactly as the step-through of the whole turn at once does.

Costs are counted (queries, rows made), never timed."""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.db.models.signals import post_init
from django.test import Client
from django.test.utils import CaptureQueriesContext
from django.urls import reverse

from conversations.models import Exchange, Step, Turn
from inspector import walkthrough
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory, UserFactory

pytestmark = pytest.mark.django_db

ROWS = 5_000


@pytest.fixture
def alice() -> User:
    return UserFactory(username="alice")


def client_for(user: User) -> Client:
    client = Client()
    client.force_login(user)
    return client


def turn_of(user: User, rows: int) -> tuple[str, Turn]:
    """A turn of ``rows`` model-call rows, each with its own prompt (one slide each)."""
    conversation = ConversationFactory(owner=user)
    turn = TurnFactory(conversation=conversation)
    Step.objects.bulk_create(
        [
            Step(turn=turn, seq=n, kind=Step.Kind.DECIDE, status=Step.Status.OK, prompt=f"prompt of row {n}.")
            for n in range(1, rows + 1)
        ]
    )
    return reverse("inspector-turn-walk", args=[conversation.public_id, turn.pk]), turn


class Made:
    """How many steps the ORM makes from rows it reads (``post_init``: one per row read)."""

    def __init__(self) -> None:
        self.steps = 0

    def __call__(self, sender: type, **kwargs: object) -> None:
        self.steps += 1


def read(client: Client, url: str, query: dict[str, str]) -> tuple[str, int, int]:
    """The page, the queries it took and the steps it made."""
    made = Made()
    post_init.connect(made, sender=Step)
    try:
        with CaptureQueriesContext(connection) as queries:
            response = client.get(url, query)
    finally:
        post_init.disconnect(made, sender=Step)
    assert response.status_code == 200
    return response.content.decode(), len(queries), made.steps


def test_a_slide_of_a_turn_of_five_thousand_rows_reads_one_page_of_rows(alice: User) -> None:
    url, _ = turn_of(alice, ROWS)
    small, _ = turn_of(alice, 2 * walkthrough.ROWS_PAGE)
    client = client_for(alice)
    page = walkthrough.ROWS_PAGE
    middle = ROWS // page // 2 + 1
    for warm in (url, small):  # a reader's first read of a conversation is audited; the next are not
        assert client.get(warm).status_code == 200

    first, first_queries, first_made = read(client, url, {})
    inner, inner_queries, inner_made = read(client, url, {"page": str(middle), "at": "2"})
    last, last_queries, last_made = read(client, url, {"page": str(ROWS // page), "at": "last"})
    _, small_queries, _ = read(client, small, {"page": "2", "at": "1"})

    # A page of rows, and the one after it to know whether the turn goes on: never the turn.
    assert max(first_made, inner_made, last_made) <= page + 1
    # The same queries for any page of any turn: its size is no cost.
    assert first_queries == inner_queries == last_queries == small_queries
    assert "prompt of row 1." in first and f"slide 1 of {page} · rows 1–{page} of {ROWS:,}" in first
    row = (middle - 1) * page + 2
    assert f"prompt of row {row}." in inner
    assert f"slide 2 of {page} · rows {row - 1:,}–{row + page - 2:,} of {ROWS:,}" in inner
    assert f"prompt of row {ROWS}." in last and f"slide {page} of {page}" in last
    # The ends link on to the next page and back to the previous one's last slide.
    assert 'data-slide-next href="?at=2"' in first and "data-slide-prev" not in first
    assert f'data-slide-prev href="?page={middle}&amp;at=1"' in inner
    assert f'data-slide-next href="?page={middle}&amp;at=3"' in inner
    assert f'data-slide-prev href="?page={ROWS // page}&amp;at={page - 1}"' in last
    assert "data-slide-next" not in last


SLIDE = re.compile(r'<article class="slide[^"]*" id="slide".*?</article>', re.S)


def slide_of(html: str) -> str:
    found = SLIDE.search(html)
    assert found is not None
    return re.sub(r' data-at="\d+"', "", found.group(0))


def link(html: str, direction: str) -> str | None:
    found = re.search(rf'data-slide-{direction} href="([^"]+)"', html)
    return None if found is None else found.group(1).replace("&amp;", "&")


def walk(client: Client, url: str, start: str, direction: str) -> Iterator[str]:
    at: str | None = start
    while at is not None:
        response = client.get(url + at)
        assert response.status_code == 200
        html = response.content.decode()
        yield slide_of(html)
        at = link(html, direction)


def varied_turn(user: User) -> tuple[str, Turn]:
    """Seven rows of every kind, one to five slides each; an error row third (the last of the
    first page of three), after which the turn went on."""
    conversation = ConversationFactory(owner=user)
    turn = TurnFactory(conversation=conversation)
    connect = StepFactory(turn=turn, kind=Step.Kind.CONNECT, title="connect")
    ExchangeFactory(
        step=connect, channel=Exchange.Channel.MCP, label="tools/list", response_body='{"tools": []}'
    )
    for n in range(3):
        decide = StepFactory(
            turn=turn,
            prompt=f"the prompt, call {n}",
            calls=[{"id": f"c{n}", "name": "echo", "arguments": {"text": f"call {n}"}, "valid": True}],
        )
        ExchangeFactory(step=decide, request_body=f'{{"n": {n}}}')
        tool = StepFactory(turn=turn, parent=decide, kind=Step.Kind.TOOL, title=f"echo {n}")
        ExchangeFactory(
            step=tool,
            channel=Exchange.Channel.MCP,
            label="tools/call",
            request_body=f'{{"method": "tools/call", "n": {n}}}',
        )
        if n == 0:
            StepFactory(turn=turn, kind=Step.Kind.ERROR, title="the model's reply did not parse", error="bad")
    StepFactory(turn=turn, kind=Step.Kind.FALLBACK, title="fell back", text="to the prompt")
    answer = StepFactory(turn=turn, kind=Step.Kind.ANSWER, prompt="the last prompt", text="Done.")
    ExchangeFactory(step=answer)
    return reverse("inspector-turn-walk", args=[conversation.public_id, turn.pk]), turn


def test_stepping_through_pages_of_rows_walks_every_slide_of_every_row_in_order_both_ways(
    alice: User, monkeypatch: pytest.MonkeyPatch
) -> None:
    url, turn = varied_turn(alice)
    client = client_for(alice)
    rows = list(
        Step.objects.filter(turn=turn, parent__isnull=True).order_by("seq").values_list("seq", flat=True)
    )
    assert len(rows) == 7
    error = Step.objects.get(turn=turn, kind=Step.Kind.ERROR).seq

    # The whole turn on one page: the step-through as it always was.
    whole = list(walk(client, url, "?at=1", "next"))
    assert len(whole) > len(rows)
    seqs = [
        int(seq)
        for slide in whole
        for seq in re.findall(r'class="slide-title">(?:<span[^>]*>\w+</span> )?#(\d+)', slide)
    ]
    assert seqs == sorted(seqs) and set(seqs) == set(rows)
    assert "the host recovered" in whole[seqs.index(error)]

    monkeypatch.setattr(walkthrough, "ROWS_PAGE", 3)
    forth = list(walk(client, url, "?at=1", "next"))
    assert forth == whole
    back = list(walk(client, url, "?page=3&at=last", "prev"))
    assert back == whole[::-1]

    bob = client_for(UserFactory(username="bob"))
    assert bob.get(url + "?page=2&at=1").status_code == 404
