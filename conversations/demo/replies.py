"""Replies: deciding (call tools or answer in text), repairing once after an error result, and
writing the final answer from fixed templates labelled :data:`ANSWER_PREFIX`.

The result is a :class:`Turn` (calls, text and form flaws), independent of the format it will
be written in.

Pure Python: no Django, no I/O, no randomness.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace

from conversations.demo.arguments import candidate_argument_sets, repaired_arguments
from conversations.demo.fit import Fit, description_fit
from conversations.demo.request import Call, Message, Request, Tool, json_or_none, new_call
from conversations.demo.scenarios import FLAWS, MISBEHAVIOURS
from conversations.demo.understanding import (
    Question,
    best_tool,
    follow_up_text,
    last_user_index,
    read_facts,
    score_tool,
    tool_named,
)

ANSWER_PREFIX = "[demo model] "

_QUOTE_LIMIT = 500


# --- Responding ----------------------------------------------------------------------------


@dataclass(frozen=True)
class _Result:
    call: Call
    text: str
    is_error: bool


@dataclass(frozen=True)
class _Round:
    calls: tuple[Call, ...]
    results: tuple[_Result, ...]


@dataclass(frozen=True)
class Turn:
    """What the demo decided, before it is written in the request's format."""

    content: str | None
    calls: tuple[Call, ...] = ()
    flaws: frozenset[str] = frozenset()  # form misbehaviours the writer must apply


def respond_to(request: Request, question: Question) -> Turn:
    rounds = rounds_after(request.messages, last_user_index(request.messages))
    if rounds:
        if request.can_call and needs_repair(rounds):
            return repair(request, question, rounds[-1])
        return Turn(_final_answer(rounds))
    if not request.can_call:
        return Turn(_plain_answer(request, question))
    return decide(request, question)


def rounds_after(messages: Sequence[Message], start: int) -> list[_Round]:
    """The tool-call rounds (assistant calls and their results) after message ``start``."""
    rounds: list[_Round] = []
    for message in messages[start + 1 :]:
        if message.role == "assistant" and message.calls:
            rounds.append(_Round(message.calls, ()))
        elif message.role == "tool" and rounds:
            latest = rounds[-1]
            call = next((call for call in latest.calls if call.id == message.tool_call_id), None)
            if call is not None:
                result = _Result(call, message.text, is_error_result(message.text))
                rounds[-1] = replace(latest, results=(*latest.results, result))
    return rounds


_ERROR_PHRASES = re.compile(
    r"^\W*(?:tool |mcp )?error\b|\binvalid (?:arguments?|json|input|params|parameters?|value)\b"
    r"|\bunknown tool\b|\bno such tool\b|\bis a required property\b|\bvalidation (?:error|failed)\b"
    r"|\bcould not (?:parse|decode)\b",
    re.IGNORECASE,
)


def is_error_result(text: str) -> bool:
    """Whether a tool message reports a failure, as hosts word them ("Error: invalid arguments
    for tool X: ...") or as JSON with an ``error`` or ``isError`` field."""
    if _ERROR_PHRASES.search(text):
        return True
    parsed = json_or_none(text)
    return isinstance(parsed, dict) and (bool(parsed.get("error")) or parsed.get("isError") is True)


def needs_repair(rounds: Sequence[_Round]) -> bool:
    """Repair once per question: only when the latest round failed and no earlier one did."""
    latest_failed = any(result.is_error for result in rounds[-1].results)
    earlier_failed = any(result.is_error for past in rounds[:-1] for result in past.results)
    return latest_failed and not earlier_failed


def _first_attempt(messages: Sequence[Message]) -> bool:
    """Whether nothing was answered yet after the question (a re-ask follows a reply)."""
    return not any(message.role == "assistant" for message in messages[last_user_index(messages) + 1 :])


def decide(request: Request, question: Question) -> Turn:
    if not _first_attempt(request.messages):
        # Asked again after a reply that broke the rules: this time the demo behaves.
        question = replace(question, markers=frozenset())
    facts = read_facts(question.text)
    candidates = request.candidates()
    match = best_tool(candidates, facts)
    if match.score == 0:
        # A follow-up that names no tool ("And in Paris tomorrow?") asks the previous question
        # again with its own place and day (docs/usage.md, "The demo model").
        again = follow_up_text(request.messages, question.text)
        if again is not None and best_tool(candidates, read_facts(again)).score:
            question = replace(question, text=again)
            facts = read_facts(again)
            match = best_tool(candidates, facts)
    if "no-tool" in question.markers:
        fits = f" The tool {match.tool.name} would fit." if match.score else ""
        return Turn(f"{ANSWER_PREFIX}I answer without calling a tool, as [demo:no-tool] asks.{fits}")
    if request.choice.mode == "auto" and match.score == 0:
        return Turn(_no_fit_answer(question, candidates))
    # The tool's description must fit the question (conversations.demo.fit, docs/evals.md §8).
    if request.choice.mode == "auto":
        fit = description_fit(match.tool, facts, among=len(candidates))
        if not fit.fits:
            return Turn(_unfit_answer(match.tool, fit))
    argument_sets = candidate_argument_sets(match.tool, facts, match.keyword)
    if not request.parallel:
        argument_sets = argument_sets[:1]
    calls = [
        new_call(request, index, match.tool.name, arguments) for index, arguments in enumerate(argument_sets)
    ]
    offered = frozenset(tool.name for tool in request.tools)
    for marker, misbehave in MISBEHAVIOURS.items():
        if marker in question.markers:
            calls[0] = misbehave(calls[0], match.tool, offered)
    return Turn(None, tuple(calls), question.markers & FLAWS)


def repair(request: Request, question: Question, latest: _Round) -> Turn:
    """Call again each tool whose result was an error. The fields the error names are repaired
    (``arguments.repaired_arguments``: a missing one filled, a rejected value replaced by one the
    schema accepts), the rest kept as sent and what was left out filled afresh; an error that
    names no field gets freshly filled
    arguments, which for the same question are the same (a timeout is retried as it was). A
    call to an unknown name goes to the offered tool with the closest name."""
    facts = read_facts(question.text)
    candidates = request.candidates()
    calls: list[Call] = []
    for result in latest.results:
        if not result.is_error:
            continue
        tool = tool_named(result.call.name, candidates)
        argument_sets = candidate_argument_sets(tool, facts, score_tool(tool, facts).keyword)
        siblings = [call.id for call in latest.calls if call.name == result.call.name]
        arguments = argument_sets[min(siblings.index(result.call.id), len(argument_sets) - 1)]
        sent = json_or_none(result.call.arguments)
        if tool.name == result.call.name and isinstance(sent, dict):
            repaired = repaired_arguments(tool, sent, result.text, facts)
            if repaired is not None:
                # What was sent, with the named fields repaired and anything left out filled.
                arguments = {**arguments, **repaired}
        calls.append(new_call(request, len(calls), tool.name, arguments))
        if not request.parallel:
            break
    return Turn(None, tuple(calls))


def _final_answer(rounds: Sequence[_Round]) -> str:
    """One sentence per tool result; failed results of earlier rounds were repaired since and
    are left out."""
    sentences = [
        _describe_result(result)
        for position, past in enumerate(rounds)
        for result in past.results
        if not (result.is_error and position < len(rounds) - 1)
    ]
    return ANSWER_PREFIX + (" ".join(sentences) or "The tools returned nothing.")


def _describe_result(result: _Result) -> str:
    name = result.call.name
    if result.is_error:
        return f"The tool {name} failed: {_quote(result.text)}."
    parsed = json_or_none(result.text)
    if isinstance(parsed, dict) and isinstance(parsed.get("summary"), str) and str(parsed["summary"]).strip():
        return f"{name} reports: {_sentence(str(parsed['summary']))}"
    if not result.text.strip():
        return f"{name} returned nothing."
    return f"{name} returned: {_quote(result.text)}."


def _plain_answer(request: Request, question: Question) -> str:
    if not question.text:
        return f"{ANSWER_PREFIX}There is no user question to answer."
    reason = "no tools were offered" if not request.tools else 'tool_choice is "none"'
    return (
        f"{ANSWER_PREFIX}You asked: {_quote(question.text)}. I am an offline demo model with no "
        f"knowledge of my own, and {reason}, so I cannot look this up."
    )


def _no_fit_answer(question: Question, tools: Sequence[Tool]) -> str:
    names = ", ".join(tool.name for tool in tools)
    return (
        f"{ANSWER_PREFIX}None of the offered tools ({names}) fits the question "
        f"{_quote(question.text)}, so I answer without calling one."
    )


def _unfit_answer(tool: Tool, fit: Fit) -> str:
    if fit.refuses:
        why = f"its description says that it does not take {' or '.join(fit.refuses)}"
    elif not fit.described:
        why = "it has no description to tell it apart from the other tools"
    else:
        why = f"its description does not say that it takes {' or '.join(fit.given)}"
    return f"{ANSWER_PREFIX}The tool {tool.name} might fit, but {why}, so I answer without calling it."


def _quote(text: str) -> str:
    """``text`` in double quotes, whitespace collapsed, cut to about 500 characters."""
    collapsed = " ".join(text.split())
    if len(collapsed) > _QUOTE_LIMIT:
        collapsed = collapsed[:_QUOTE_LIMIT].rstrip() + "…"
    return f'"{collapsed}"'


def _sentence(text: str) -> str:
    text = " ".join(text.split())
    return text if text.endswith((".", "!", "?")) else f"{text}."
