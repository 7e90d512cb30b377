"""Full-text search on PostgreSQL, the scaled deployment's path: stemming, web-search syntax,
raw payloads of any size. ``make test`` runs this in its PostgreSQL pass; on any other
database these tests fail (they never skip), since what they check does not exist there."""

from __future__ import annotations

import hashlib
import json
from collections.abc import Iterator
from datetime import UTC, datetime
from typing import Any

import httpx2
import pytest
from django.contrib.auth.models import User
from django.db import DataError, connection, transaction

from conversations.loop.providers.base import ModelReply, ModelRequest
from conversations.loop.providers.openai_chat import OpenAIChatProvider
from conversations.loop.wire import WireExchange
from conversations.models import FTS_BODY_CHARS, SEARCH_SPAN_MOST, Exchange, Step
from conversations.record.exchanges import exchange_rows
from conversations.record.recording import TurnRecorder, index_last_request_whole
from conversations.redaction import redactor
from conversations.selectors import ConversationFilters, conversation_search
from tests.conversations.provider_fakes import QUESTION, serve, sse
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory, UserFactory

pytestmark = [pytest.mark.postgres, pytest.mark.django_db]

# These tests search the raw payloads (``conversations.selectors.scopes``: not searched by default).
RAW = ("raw",)


@pytest.fixture(autouse=True)
def _on_postgres() -> Iterator[None]:
    if connection.vendor != "postgresql":
        pytest.fail(
            f"this module tests PostgreSQL full-text search, but the database is {connection.vendor}: "
            "run it with DATABASE_URL=postgres://… (make test-postgres)"
        )
    yield


@pytest.fixture
def alice() -> User:
    return UserFactory(username="alice")


def found(user: User, q: str) -> list[str]:
    return [c.title for c in conversation_search(user=user, filters=ConversationFilters(q=q, scope=RAW))]


def asked(owner: User, title: str, **turn: Any) -> None:
    TurnFactory(conversation=ConversationFactory(owner=owner, title=title), **turn)


def test_the_search_runs_as_postgres_full_text_search(alice: User) -> None:
    query = str(conversation_search(user=alice, filters=ConversationFilters(q="rain")).query)

    assert "to_tsvector" in query and "websearch_to_tsquery" in query


def test_words_are_stemmed_in_questions_and_answers(alice: User) -> None:
    asked(alice, "rainy", question="Will it be raining in Bergen?")
    asked(alice, "forecasts", answer="Both forecasts agree: sunny.")

    assert found(alice, "rain") == ["rainy"]
    assert found(alice, "forecast") == ["forecasts"]


def test_web_search_syntax_phrases_or_and_exclusion(alice: User) -> None:
    asked(alice, "paris rain", question="Rain in Paris tomorrow?")
    asked(alice, "paris sun", question="Sun in Paris tomorrow?")
    asked(alice, "oslo snow", question="Snow in Oslo tomorrow?")

    assert found(alice, "paris -rain") == ["paris sun"]
    assert found(alice, "rain or snow") == ["oslo snow", "paris rain"]
    assert found(alice, '"tomorrow paris"') == []


def test_tool_names_and_values_in_raw_json_bodies_are_found(alice: User) -> None:
    step = StepFactory(turn=TurnFactory(conversation=ConversationFactory(owner=alice, title="raw")))
    ExchangeFactory(
        step=step,
        mcp=True,
        request_body='{"method": "tools/call", "params": {"name": "get_weather_forecast", "arguments": {"city": "Ulaanbaatar"}}}',
        response_body='{"result": {"content": [{"type": "text", "text": "Ulaanbaatar: -12 C"}]}}',
    )
    asked(alice, "unrelated", question="What is 2 + 2?")

    assert found(alice, "get_weather_forecast") == ["raw"]
    assert found(alice, "ulaanbaatar") == ["raw"]


def test_a_huge_varied_body_neither_breaks_the_search_nor_hides_its_beginning(alice: User) -> None:
    # Distinct tokens are what make a tsvector big: 2 MB of hashes would overflow its 1 MB.
    noise = " ".join(hashlib.md5(str(n).encode()).hexdigest() for n in range(60_000))
    step = StepFactory(turn=TurnFactory(conversation=ConversationFactory(owner=alice, title="huge")))
    ExchangeFactory(step=step, mcp=True, response_body="Kinshasa " + noise + " Timbuktu")
    assert len(noise) > 2 * FTS_BODY_CHARS

    assert found(alice, "kinshasa") == ["huge"]
    # Past the indexed prefix of a body, PostgreSQL does not look (documented; SQLite does).
    assert found(alice, "timbuktu") == []


def test_a_conversation_matching_in_many_rows_is_listed_once(alice: User) -> None:
    conversation = ConversationFactory(owner=alice, title="chatty")
    for _ in range(3):
        step = StepFactory(
            turn=TurnFactory(conversation=conversation, question="Lagos?", answer="Lagos: hot")
        )
        ExchangeFactory(step=step, request_body='"Lagos"', response_body='"Lagos"')

    assert found(alice, "lagos") == ["chatty"]


def test_other_peoples_conversations_are_not_found(alice: User) -> None:
    asked(UserFactory(username="bob"), "bob's", question="Where is Atlantis?")

    assert found(alice, "atlantis") == []


# --- the indexes of migration 0010_audit_indexes ------------------------------------------------


def test_the_search_and_tool_indexes_exist(alice: User) -> None:
    with connection.cursor() as cursor:
        cursor.execute("SELECT indexname, indexdef FROM pg_indexes WHERE tablename LIKE 'conversations_%%'")
        definitions = dict(cursor.fetchall())

    assert {"conversations_turn_search_gin", "conversations_exchange_search_gin"} <= set(definitions)
    # The tool filter and the turn-to-conversation step read their indexes alone (covering).
    assert "(tool_name) INCLUDE (turn_id) WHERE" in definitions["step_tool_turn_idx"]
    assert "(title) INCLUDE (turn_id) WHERE" in definitions["step_tool_title_turn_idx"]
    assert "(id) INCLUDE (conversation_id)" in definitions["turn_id_conversation_idx"]
    # Migration 0013: an exchange's request body is indexed whole or for its span.
    assert "search_start" in definitions["conversations_exchange_search_gin"]


def tool_call(owner: User, title: str, tool: str, server_tool: str) -> None:
    turn = TurnFactory(conversation=ConversationFactory(owner=owner, title=title))
    StepFactory(turn=turn, parent=StepFactory(turn=turn), kind="tool", tool_name=tool, title=server_tool)


def test_the_filters_find_the_same_conversations_with_the_indexes(alice: User) -> None:
    tool_call(alice, "forecast", "get_weather_forecast", "demo/get_weather_forecast")
    tool_call(alice, "sum", "calculate", "demo/calculate")
    tool_call(
        UserFactory(username="bob"), "bob's forecast", "get_weather_forecast", "demo/get_weather_forecast"
    )
    # A decide step that merely mentions the tool is no call of it.
    StepFactory(
        turn=TurnFactory(conversation=ConversationFactory(owner=alice, title="mention")),
        title="get_weather_forecast",
    )
    asked(alice, "answered", answer="Reykjavik will be windy.")
    step = StepFactory(turn=TurnFactory(conversation=ConversationFactory(owner=alice, title="on the wire")))
    ExchangeFactory(step=step, response_body='{"city": "Reykjavik"}')

    def titles(**filters: str) -> list[str]:
        return sorted(
            c.title
            for c in conversation_search(user=alice, filters=ConversationFilters(**filters, scope=RAW))
        )

    assert titles(tool="get_weather_forecast") == ["forecast"]
    assert titles(tool="demo/calculate") == ["sum"]
    assert titles(tool="list_notes") == []
    assert titles(q="reykjavik") == ["answered", "on the wire"]
    assert titles(q="reykjavik", tool="calculate") == []


# --- what a model request adds: migration 0013_exchange_search_span -------------------------------


def _request(messages: list[str]) -> WireExchange:
    body = json.dumps(
        {"messages": [{"role": "user", "content": m} for m in messages], "tools": [{"name": "calc"}]}
    )
    return WireExchange(
        channel="llm", label="POST /chat/completions", started_at=datetime.now(UTC), request_body=body
    )


@pytest.mark.django_db(transaction=True)
def test_each_model_request_is_indexed_for_what_it_adds_and_the_last_one_whole() -> None:
    alice = UserFactory(username="alice")
    turn = TurnFactory(conversation=ConversationFactory(owner=alice, title="spans"), question="Sums?")
    recorder = TurnRecorder(turn)
    history = ["Add the Quetzal numbers"]
    for word in ("Narwhal", "Okapi", "Pangolin"):
        step = recorder.step_open(kind="decide", title="model call")
        recorder.step_close(step, status="ok", exchanges=[_request(history)])
        history = [*history, f"the tool said {word} 42"]
    recorder.drain()

    rows = list(Exchange.objects.filter(turn=turn).order_by("seq"))
    # The first request is indexed whole; later ones only for the message they add.
    assert rows[0].search_start is None
    for row, added in zip(rows[1:], history[1:], strict=False):
        assert row.search_start is not None and row.search_length is not None
        span = row.request_body[row.search_start : row.search_start + row.search_length]
        assert added in span and "Quetzal" not in span
    assert found(alice, "okapi") == ["spans"]  # in the middle request's span
    # While the turn runs, words spread over the history are not in one indexed span...
    assert found(alice, "quetzal okapi") == []

    index_last_request_whole(turn.pk)

    # ...once it has ended, its last request is indexed whole: they are.
    last = Exchange.objects.get(pk=rows[-1].pk)
    assert (last.search_start, last.search_length) == (None, None)
    assert found(alice, "quetzal okapi") == ["spans"]
    assert found(alice, '"tool said okapi"') == ["spans"]


# --- a streamed reply: migration 0028_exchange_response_search -------------------------------------

SECRET = "sk-proj-" + "Zq9Xw8Vu7Ts6Rr5Qp4Oo3Nn2"


def _streamed_reply(text: str, piece: int = 5) -> ModelReply:
    """``text`` as an OpenAI model streams it, ``piece`` characters an event, read by the provider."""
    chunks = [
        {"id": "c", "object": "chat.completion.chunk", "choices": [{"index": 0, "delta": {"content": part}}]}
        for part in (text[i : i + piece] for i in range(0, len(text), piece))
    ]
    stream = sse(
        [
            *chunks,
            {
                "id": "c",
                "object": "chat.completion.chunk",
                "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
            },
        ],
        done=True,
    )
    provider, _ = serve(
        OpenAIChatProvider,
        lambda request: httpx2.Response(
            200, content=stream.encode(), headers={"content-type": "text/event-stream"}
        ),
        stream=True,
    )
    return provider.complete(ModelRequest(messages=QUESTION))


@pytest.mark.django_db(transaction=True)
def test_a_streamed_reply_is_found_by_a_word_its_events_cut_and_what_it_assembled_to_is_redacted() -> None:
    alice = UserFactory(username="alice")
    turn = TurnFactory(
        conversation=ConversationFactory(owner=alice, title="streamed"), question="Which city?"
    )
    reply = _streamed_reply(f"The capital was Tenochtitlan; the key is {SECRET}.")
    recorder = TurnRecorder(turn)
    step = recorder.step_open(kind="decide", title="model call")
    recorder.step_close(step, status="ok", text=reply.text or "", exchanges=[reply.exchange])
    recorder.drain()

    row = Exchange.objects.get(turn=turn)
    assert '" Teno"' in row.response_body and "Tenochtitlan" not in row.response_body  # cut by the events
    assert found(alice, "tenochtitlan") == ["streamed"]
    assert found(alice, '"capital was tenochtitlan"') == ["streamed"]
    # Redacted before it was cut and stored, as the raw body is.
    assert SECRET not in row.response_search and "[REDACTED:api_key]" in row.response_search
    assert SECRET not in row.response_body
    # The same events recorded without what they assembled to (as before this migration, or a
    # stream the provider could not read): searched by the body, where the word is cut.
    other = StepFactory(turn=TurnFactory(conversation=ConversationFactory(owner=alice, title="raw")))
    ExchangeFactory(step=other, response_body=row.response_body)
    assert found(alice, "tenochtitlan") == ["streamed"]
    assert found(alice, "teno") == ["raw"]


def test_what_stands_for_a_response_in_search_is_cut_where_the_index_reads() -> None:
    long = _streamed_reply("word " * 50_000, piece=4_000)
    rows = exchange_rows([long.exchange], turn_id=None, step_id=None, redact=redactor())

    assert len(rows[0].response_search) == FTS_BODY_CHARS


def test_the_exchange_search_uses_its_index(alice: User) -> None:
    text_filter = conversation_search(user=alice, filters=ConversationFilters(q="okapi", scope=RAW))
    with connection.cursor() as cursor:
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = text_filter.values("pk").query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    assert "conversations_exchange_search_gin" in plan
    assert "conversations_turn_search_gin" in plan


def test_each_default_scope_uses_its_own_index(alice: User) -> None:
    # Enough tool steps that the planner prefers the selective index to reading them all.
    turn = TurnFactory(conversation=ConversationFactory(owner=alice))
    Step.objects.bulk_create(
        Step(turn=turn, seq=seq, kind="tool", tool_name="calculate", arguments={"n": seq}, result={"n": seq})
        for seq in range(1, 2001)
    )
    text_filter = conversation_search(user=alice, filters=ConversationFilters(q="okapi"))
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE conversations_step")
        cursor.execute("SET LOCAL enable_seqscan = off")
        sql, params = text_filter.values("pk").query.sql_with_params()
        cursor.execute(f"EXPLAIN {sql}", params)
        plan = "\n".join(row[0] for row in cursor.fetchall())

    for index in ("turn_question", "turn_answer", "step_call", "step_result"):
        assert f"conversations_{index}_gin" in plan, plan
    assert "conversations_exchange_search_gin" not in plan


def test_the_search_span_columns_hold_search_span_most_and_not_one_more() -> None:
    # Why the recorder keeps no span past SEARCH_SPAN_MOST (``record.exchanges.request_search_span``):
    # one more and the index's ``search_start + 1`` overflows, and the insert, with its whole
    # batch of the record, would be refused.
    step = StepFactory()
    ExchangeFactory(step=step, search_start=SEARCH_SPAN_MOST, search_length=SEARCH_SPAN_MOST)

    with pytest.raises(DataError, match="out of range"), transaction.atomic():
        ExchangeFactory(step=step, search_start=SEARCH_SPAN_MOST + 1, search_length=1)
    assert Exchange.objects.filter(step=step).count() == 1
