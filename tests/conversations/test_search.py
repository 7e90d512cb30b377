"""Search says where: the list's text filter looks in questions, answers, tool calls and tool
results by default, and in the raw payloads (tool definitions included) only when asked to; the
same scopes in the form and the API. Run on both databases (PostgreSQL's full-text path, SQLite's
``LIKE`` path)."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User
from django.test import Client
from django.urls import reverse

from conversations.selectors import ConversationFilters, conversation_search
from conversations.selectors.scopes import DEFAULT_SCOPES, scopes_clean
from tests.factories import ConversationFactory, ExchangeFactory, StepFactory, TurnFactory, UserFactory

pytestmark = pytest.mark.django_db

# The weather tool's description, which every model request of a conversation offering it carries.
WEATHER_TOOL = {
    "type": "function",
    "function": {"name": "get_forecast", "description": "The forecast for a city such as Beijing or Paris"},
}


def _conversation(
    owner: User, title: str, *, question: str, answer: str, tool: str, arguments: object, result: object
) -> None:
    conversation = ConversationFactory(owner=owner, title=title)
    turn = TurnFactory(conversation=conversation, question=question, answer=answer)
    decide = StepFactory(turn=turn, title=f"calls {tool}")
    ExchangeFactory(
        step=decide,
        request_body=json.dumps(
            {"messages": [{"role": "user", "content": question}], "tools": [WEATHER_TOOL]}
        ),
        response_body=json.dumps({"choices": [{"message": {"content": ""}}]}),
    )
    StepFactory(turn=turn, parent=decide, kind="tool", tool_name=tool, arguments=arguments, result=result)


@pytest.fixture
def alice() -> User:
    owner = UserFactory(username="alice")
    _conversation(
        owner,
        "asked about Beijing",
        question="What will the weather be like in Beijing tomorrow?",
        answer="Clear skies in Beijing.",
        tool="get_forecast",
        arguments={"city": "Beijing"},
        result={"content": [{"type": "text", "text": "Beijing: clear"}]},
    )
    _conversation(
        owner,
        "arithmetic",
        question="What is 3 + 4 * 5?",
        answer="23",
        tool="calculate",
        arguments={"expression": "3 + 4 * 5"},
        result={"content": [{"type": "text", "text": "23"}]},
    )
    _conversation(
        owner,
        "answered about Beijing",
        question="Is Paris mild in spring?",
        answer="Milder than Beijing, yes.",
        tool="get_forecast",
        arguments={"city": "Paris"},
        result={"content": [{"type": "text", "text": "Paris: mild"}]},
    )
    _conversation(
        owner,
        "returned Beijing",
        question="Which capital has the most people?",
        answer="The tool says so.",
        tool="largest_capital",
        arguments={"continent": "Asia"},
        result={"content": [{"type": "text", "text": "Beijing"}]},
    )
    return owner


def _found(user: User, *scopes: str) -> set[str]:
    filters = ConversationFilters(q="Beijing", scope=scopes)
    return {conversation.title for conversation in conversation_search(user=user, filters=filters)}


def test_by_default_a_word_of_a_tool_description_does_not_match_every_conversation(alice: User) -> None:
    assert _found(alice) == {"asked about Beijing", "answered about Beijing", "returned Beijing"}


@pytest.mark.parametrize(
    ("scope", "titles"),
    [
        ("question", {"asked about Beijing"}),
        ("answer", {"asked about Beijing", "answered about Beijing"}),
        ("call", {"asked about Beijing"}),
        ("result", {"asked about Beijing", "returned Beijing"}),
        # The raw payloads carry the tool's description: every conversation offered it.
        ("raw", {"asked about Beijing", "arithmetic", "answered about Beijing", "returned Beijing"}),
    ],
)
def test_each_scope_searches_only_its_part_of_the_record(alice: User, scope: str, titles: set[str]) -> None:
    assert _found(alice, scope) == titles


def test_scopes_combine_and_an_unknown_one_is_refused(alice: User) -> None:
    assert _found(alice, "question", "result") == {"asked about Beijing", "returned Beijing"}
    assert scopes_clean([]) == DEFAULT_SCOPES
    with pytest.raises(ValueError, match="unknown search scope tools"):
        scopes_clean(["tools"])


def test_the_list_form_and_the_api_take_the_scope(alice: User) -> None:
    client = Client()
    client.force_login(alice)

    page = client.get(
        reverse("inspector-conversations"), {"q": "Beijing", "scope": "question"}
    ).content.decode()
    answer = client.get(reverse("api-conversations"), {"q": "Beijing", "scope": ["result"]}).json()
    default = client.get(reverse("api-conversations"), {"q": "Beijing"}).json()
    refused = client.get(reverse("api-conversations"), {"q": "Beijing", "scope": "tools"})

    assert "asked about Beijing" in page and "returned Beijing" not in page
    assert 'name="scope" value="raw"' in page
    assert {row["title"] for row in answer["results"]} == {"asked about Beijing", "returned Beijing"}
    assert "arithmetic" not in {row["title"] for row in default["results"]} and len(default["results"]) == 3
    assert refused.status_code == 400


@pytest.mark.parametrize(
    ("q", "scope", "title"),
    [
        ("Zürich", "call", "called with Zürich"),
        ("zürich", "call", "called with Zürich"),
        ("東京", "result", "returned 東京"),
        ("🌧", "result", "returned 東京"),
        ("ZÜRICH note", "call", "called with Zürich"),
    ],
)
def test_words_outside_ascii_in_a_tool_call_or_result_are_found(q: str, scope: str, title: str) -> None:
    """SQLite keeps JSON with every character outside ASCII escaped (``\\u00fc``): a tool's
    arguments and result are searched in both forms, as PostgreSQL's ``jsonb`` finds them."""
    owner = UserFactory(username="carol")
    _conversation(
        owner,
        "called with Zürich",
        question="How is the weather there?",
        answer="Mild.",
        tool="get_forecast",
        arguments={"city": "Zürich", "note": 'say "hi"'},
        result={"content": [{"type": "text", "text": "mild"}]},
    )
    _conversation(
        owner,
        "returned 東京",
        question="Which city is largest?",
        answer="The tool says so.",
        tool="largest_city",
        arguments={"continent": "Asia"},
        result={"content": [{"type": "text", "text": "東京: 🌧 雨"}]},
    )

    filters = ConversationFilters(q=q, scope=(scope,))
    found = {conversation.title for conversation in conversation_search(user=owner, filters=filters)}

    assert found == {title}
