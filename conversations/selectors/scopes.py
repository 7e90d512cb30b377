"""Where the conversation list's text filter looks: its scopes.

A question is asked once, but the tools' descriptions travel in every model request: a search
of the raw payloads for a word of a tool's description finds every conversation that offered
the tool. So the text filter searches what was asked, answered, called and returned by default
(``DEFAULT_SCOPES``), and the raw payloads (tool definitions included) only when asked to.

Each scope is one kind of row and one document:

* ``question``, ``answer`` — the turn's question, its final answer;
* ``call`` — a tool call as the host ran it: the tool's name and its arguments (tool steps);
* ``result`` — what the tool returned (tool steps);
* ``raw`` — the raw exchange bodies, as the text filter searched before scopes.

PostgreSQL: full-text search, each scope's document indexed by migration
``0032_search_scopes`` on exactly the SQL the functions below compile to (the planner uses an
expression index only for the very same expression: change the two together). A search without
a letter or digit in it (an emoji, punctuation) has no word for full-text search to look up: it
is matched as text, as on SQLite. Elsewhere (the SQLite default): every word or "quoted phrase"
must occur, case-insensitively, in one row; in a tool's arguments and result (JSON, which SQLite
stores with every character outside ASCII escaped: ``Zürich`` as ``Z\\u00fcrich``) in its
stored form or in that escaped one (``_json_forms``).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Collection

from django.contrib.postgres.search import SearchQuery, SearchVector
from django.db import connection
from django.db.models import Q, QuerySet, TextField
from django.db.models.functions import Cast, Left

from conversations.models import FTS_BODY_CHARS, Step, Turn

# The scopes, in the order the form lists them, with what each one searches.
SCOPES: dict[str, str] = {
    "question": "questions",
    "answer": "answers",
    "call": "tool calls (name and arguments)",
    "result": "tool results",
    "raw": "raw payloads (tool definitions included)",
}
DEFAULT_SCOPES: tuple[str, ...] = ("question", "answer", "call", "result")
# The text search configuration (as ``selectors.FTS_CONFIG``).
FTS_CONFIG = "english"


def question_document() -> SearchVector:
    return SearchVector("question", config=FTS_CONFIG)


def answer_document() -> SearchVector:
    return SearchVector("answer", config=FTS_CONFIG)


# A tool's arguments and result are JSON of any size: their text is indexed up to
# ``FTS_BODY_CHARS`` (as a raw body is), since a text search vector has a size limit.
def call_document() -> SearchVector:
    return SearchVector("tool_name", Left(Cast("arguments", TextField()), FTS_BODY_CHARS), config=FTS_CONFIG)


def result_document() -> SearchVector:
    return SearchVector(Left(Cast("result", TextField()), FTS_BODY_CHARS), config=FTS_CONFIG)


def _terms(text: str) -> list[str]:
    """Words, or "quoted phrases", of a search text."""
    return [phrase or word for phrase, word in re.findall(r'"([^"]+)"|(\S+)', text) if phrase or word]


def _json_forms(term: str) -> set[str]:
    """``term`` as it may read inside JSON text SQLite stored: as typed, and escaped as Python's
    ``json`` (which Django's ``JSONField`` writes with) escapes it, in its own case and in lower
    and upper case (``LIKE`` folds only ASCII letters, and an escape's hex digits are ASCII)."""
    return {term, *(json.dumps(form)[1:-1] for form in (term, term.lower(), term.upper()))}


def _full_text(text: str) -> bool:
    """Whether ``text`` is searched by PostgreSQL's full-text search (it has a word to look up)."""
    return connection.vendor == "postgresql" and re.search(r"\w", text) is not None


def _turns(field: str, text: str) -> QuerySet[Turn]:
    if _full_text(text):
        document = question_document() if field == "question" else answer_document()
        query = SearchQuery(text, search_type="websearch", config=FTS_CONFIG)
        return Turn.objects.annotate(document=document).filter(document=query)
    return Turn.objects.filter(*[Q(**{f"{field}__icontains": term}) for term in _terms(text)])


def _tool_steps(scope: str, text: str) -> QuerySet[Step]:
    steps = Step.objects.filter(kind=Step.Kind.TOOL)
    if _full_text(text):
        document = call_document() if scope == "call" else result_document()
        query = SearchQuery(text, search_type="websearch", config=FTS_CONFIG)
        return steps.annotate(document=document).filter(document=query)
    column = "arguments_text" if scope == "call" else "result_text"
    steps = steps.annotate(**{column: Cast("arguments" if scope == "call" else "result", TextField())})
    matches = []
    for term in _terms(text):
        match = Q(tool_name__icontains=term) if scope == "call" else Q()
        for form in _json_forms(term):
            match |= Q(**{f"{column}__icontains": form})
        matches.append(match)
    return steps.filter(*matches)


def scopes_clean(scopes: Collection[str]) -> tuple[str, ...]:
    """``scopes`` in the form's order, the default when none is given.

    Raises:
        ValueError: an unknown scope.
    """
    unknown = sorted(set(scopes) - set(SCOPES))
    if unknown:
        raise ValueError(f"unknown search scope {', '.join(unknown)}; known: {', '.join(SCOPES)}")
    return tuple(scope for scope in SCOPES if scope in scopes) or DEFAULT_SCOPES


def scoped_text_match(text: str, scopes: Collection[str], *, raw: Callable[[str], Q]) -> Q:
    """Conversations with ``text`` in one of ``scopes`` (``scopes_clean``): all of its words in
    one question, one answer, one tool call or one result, or — with ``raw`` — in a raw exchange
    (``raw(text)``: the list's raw-payload match, which also reads questions and answers).

    Raises:
        ValueError: an unknown scope.
    """
    chosen = scopes_clean(scopes)
    ids: list[QuerySet[Turn, int] | QuerySet[Step, int]] = [
        _turns(field, text).order_by().values_list("conversation_id", flat=True)
        for field in ("question", "answer")
        if field in chosen
    ]
    ids += [
        _tool_steps(scope, text)
        .filter(turn__isnull=False)
        .order_by()
        .values_list("turn__conversation_id", flat=True)
        for scope in ("call", "result")
        if scope in chosen
    ]
    match = Q()
    if ids:
        # One IN over a UNION (as the raw match does): PostgreSQL turns a lone IN into a semi-join.
        first, *rest = ids
        match = Q(pk__in=first.union(*rest, all=True) if rest else first)
    if "raw" in chosen:
        return (match | raw(text)) if ids else raw(text)
    return match
