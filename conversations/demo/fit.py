"""The description rule: how well a tool's description fits the question, and whether the demo
model calls the tool it chose (docs/evals.md §8).

A description is read clause by clause (:func:`~conversations.demo.understanding.read_negations`:
a clause ends at ``.``, ``:``, ``;``, ``!``, ``?`` or a line end). A negation ("not", "never",
"no", "neither", "nor", "without", "cannot", "…n't") covers the rest of its clause, up to a
contrast ("but", "only", "instead", "except", "rather"): the words it covers are *refused*
("Never pass a city or a day" refuses a place and a day), the others *affirmed*. :func:`description_fit` then scores:

* **topic** — the question's words the affirmed description says, or a synonym of them ("skies"
  for "weather"): one point each;
* **takes** — the kinds of value the question gives (a place it is asked about, a day, an
  arithmetic expression, units) that the affirmed description says the tool takes, by a word of
  that kind ("city", "spot", "date"…) or by naming a parameter of the tool whose own name or
  description is of that kind: two points each;
* **refuses** — the kinds the question gives that the description refuses and nowhere affirms
  ("for a city, not a country" still takes a place): any of them and the description does not
  fit, whatever else it says.

A description that takes free text (a note, a query, a message…) takes whatever the question
gives. The tool is called (with ``tool_choice`` ``auto``) when its definition refuses nothing
the question gives and takes at least one kind of value it gives (or free text), or when the
question gives no such value at all. Which text is its definition depends on the choice the
model had: among several tools, the description alone (a catalogue is routed by what each tool
says it does) and an empty one does not fit; a lone tool is read whole, its description and its
parameters' names and descriptions (with neither, its name is all there is, and it fits).

This is word matching, not understanding: it teaches that a model decides from the text of a
definition, and ranks no real wording (docs/evals.md §8 says what it cannot see).

Pure Python: no Django, no I/O, no randomness.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass

from conversations.demo.request import Tool
from conversations.demo.understanding import (
    Facts,
    read_negations,
    synonym_groups_of,
    tool_name_words,
    word_forms_of,
    words_of,
)

# The kinds of value a question can give, and the words by which a definition says a tool takes
# one.
KIND_WORDS: dict[str, frozenset[str]] = {
    "a place": frozenset(
        "city cities place places location locations town towns country countries region regions "
        "where address area areas timezone timezones latitude longitude coordinates spot spots site "
        "sites locality earth world anywhere somewhere position".split()
    ),
    # Scheduling words say a tool takes a day as plainly as "date" does: a meeting is on one.
    "a day": frozenset(
        "day days date dates today tomorrow when weekday weekdays week schedule meeting appointment "
        "event calendar time start".split()
    ),
    "an expression": frozenset(
        "expression expressions arithmetic math calculate calculation compute formula number numbers".split()
    ),
    "units": frozenset("unit units convert conversion".split()),
}
# A definition with any of these takes free text, which can carry whatever the question gives.
FREE_TEXT_WORDS = frozenset("text note notes message content query search input prompt body".split())

_KIND_FORMS = {kind: word_forms_of(words) for kind, words in KIND_WORDS.items()}
_FREE_TEXT_FORMS = word_forms_of(FREE_TEXT_WORDS)


@dataclass(frozen=True)
class Reading:
    """The word forms of a text, split into what it affirms and what it refuses."""

    affirmed: frozenset[str]
    refused: frozenset[str]

    @classmethod
    def of(cls, text: str) -> Reading:
        affirmed, refused = read_negations(text)
        return cls(word_forms_of(affirmed), word_forms_of(refused))

    def __or__(self, other: Reading) -> Reading:
        return Reading(self.affirmed | other.affirmed, self.refused | other.refused)


_NOTHING = Reading(frozenset(), frozenset())


@dataclass(frozen=True)
class Fit:
    """How a tool's definition fits a question (see the module's docstring)."""

    given: tuple[str, ...]  # the kinds of value the question gives
    topic: tuple[str, ...]  # question words the definition affirms
    takes: tuple[str, ...]  # given kinds it says the tool takes
    refuses: tuple[str, ...]  # given kinds it refuses
    free_text: bool
    described: bool  # whether there was a definition to read at all
    # A lone tool with neither a description nor parameters: its name is all there is to go on.
    name_only: bool = False

    @property
    def score(self) -> int:
        """One point per topic word, two per kind taken; 0 when it refuses anything."""
        return 0 if self.refuses else len(self.topic) + 2 * len(self.takes)

    @property
    def fits(self) -> bool:
        if self.refuses or not self.described:
            return False
        return self.name_only or not self.given or self.free_text or bool(self.takes)


def given_kinds(facts: Facts) -> tuple[str, ...]:
    given = {
        # Stated as a place ("in Beijing"), not merely a capitalised word.
        "a place": any(
            re.search(rf"\b(?:in|for|at)\s+{re.escape(place)}", facts.text, re.IGNORECASE)
            for place in facts.places
        ),
        "a day": facts.day is not None,
        "an expression": facts.expression is not None,
        "units": facts.conversion is not None,
    }
    return tuple(kind for kind, present in given.items() if present)


def _kinds_of(forms: frozenset[str]) -> set[str]:
    return {kind for kind, kind_forms in _KIND_FORMS.items() if forms & kind_forms}


def _parameter_kinds(tool: Tool) -> dict[str, set[str]]:
    """Each parameter's name forms, mapped to the kinds its own name and description say."""
    properties = tool.parameters.get("properties")
    kinds: dict[str, set[str]] = {}
    if not isinstance(properties, dict):
        return kinds
    for name, schema in properties.items():
        words = tool_name_words(name)
        description = schema.get("description") if isinstance(schema, dict) else None
        own = word_forms_of([*words, *(words_of(description) if isinstance(description, str) else [])])
        for form in word_forms_of(words):
            kinds.setdefault(form, set()).update(_kinds_of(own))
    return kinds


def _parameters_reading(tool: Tool) -> Reading:
    properties = tool.parameters.get("properties")
    reading = _NOTHING
    if isinstance(properties, dict):
        for name, schema in properties.items():
            reading = reading | Reading(word_forms_of(tool_name_words(name)), frozenset())
            if isinstance(schema, dict) and isinstance(schema.get("description"), str):
                reading = reading | Reading.of(str(schema["description"]))
    return reading


def _said(question_words: Iterable[str], forms: frozenset[str]) -> list[str]:
    groups = {group for form in forms for group in synonym_groups_of(form)}
    said = []
    for word in question_words:
        word_forms = word_forms_of([word])
        if word_forms & forms or {g for form in word_forms for g in synonym_groups_of(form)} & groups:
            said.append(word)
    return said


def description_fit(tool: Tool, facts: Facts, *, among: int = 1) -> Fit:
    """How ``tool``'s definition fits the question whose ``facts`` are given; ``among`` is how
    many tools were offered to choose from (it decides which text is the definition)."""
    described = bool(tool.description.strip())
    given = given_kinds(facts)
    if among > 1 and not described:
        return Fit(given, (), (), (), free_text=False, described=False)
    if among == 1 and not described and not tool.parameters.get("properties"):
        return Fit(given, (), (), (), free_text=False, described=True, name_only=True)
    description = Reading.of(tool.description)
    takes = _kinds_of(description.affirmed)
    refuses = _kinds_of(description.refused)
    for form, kinds in _parameter_kinds(tool).items():
        if form in description.affirmed:
            takes |= kinds
        if form in description.refused:
            refuses |= kinds
    # "For a city, not a country" takes a place: a kind is refused only when nothing affirms it.
    refuses -= takes
    reading = description
    if among == 1:
        # A lone tool is read whole; its parameters add what it takes, never undo a refusal.
        parameters = _parameters_reading(tool)
        takes |= _kinds_of(parameters.affirmed) - refuses
        reading = description | parameters
    question_words = list(dict.fromkeys((*facts.words, *facts.intents)))
    return Fit(
        given=given,
        topic=tuple(_said(question_words, reading.affirmed)),
        takes=tuple(kind for kind in given if kind in takes),
        refuses=tuple(kind for kind in given if kind in refuses),
        free_text=bool(reading.affirmed & _FREE_TEXT_FORMS),
        described=True,
    )
