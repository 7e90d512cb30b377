"""The transcript document's one definition: its types, each field's limits, and what a stored
row shows in it.

Everything that reads or writes a transcript takes its fields from here: the document
(``conversations.record.transcripts.document``: the export, the API, ``ask --json``), its JSON Schema
(``conversations.record.transcripts.schema``: the import's validation and the API's OpenAPI document)
and the seal (``conversations.record.integrity``, which covers the same fields). This module imports
nothing but the models, so the seal can use it.

Values are stored values, unchanged (empty strings stay empty), with two readings that are the
same everywhere: ``server`` is the linked server's name, else the name the record kept
(an imported conversation, or one whose server was deleted), else null; ``jsonrpc_id`` is null
for a message without an id (a notification, or not JSON-RPC), as JSON-RPC says, not ``""``.
Version 1 documents wrote ``""`` there; they are still read (``READ_VERSIONS``).
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from typing import Annotated, NotRequired, TypedDict

from conversations.models import TOOL_CHOICE_MODES, Exchange, ModelProfile, Step, Turn
from conversations.typealias import JSONDict, JSONValue

FORMAT = "tool-call-inspector/transcript"
VERSION = 2
# The versions an import reads: 1 differs only in writing an absent JSON-RPC id as "".
READ_VERSIONS = (1, 2)

# The keys whose values are this installation's: its ids, and its keyed chain (an import is
# re-chained and re-sealed with the importer's key). They change on import, nothing else does.
ID_KEYS: dict[str, tuple[str, ...]] = {
    "conversation": ("id", "integrity"),
    "turn": ("id", "seal", "seal_steps", "seal_rule"),
    "step": ("id", "parent"),
    "exchange": ("id", "chain_version", "prev_hash", "hash"),
}


@dataclass(frozen=True)
class Limits:
    """What a field's value may be beyond its type (JSON Schema keywords). ``choices_of`` names
    a registry whose keys are the choices, filled in by whoever builds the schema
    (``schema.transcript_schema``): the registries live above this module."""

    max_length: int | None = None
    min_length: int | None = None
    pattern: str | None = None
    minimum: int | None = None
    maximum: int | None = None
    choices: tuple[str | int, ...] = ()
    choices_of: str = ""


# Seqs are stored in PositiveIntegerField columns.
SEQ = Limits(minimum=0, maximum=2_147_483_647)
HASH = Limits(pattern="^([0-9a-f]{64})?$")


def _length(limit: int) -> Limits:
    return Limits(max_length=limit)


# --- the document ------------------------------------------------------------------------------


class ProfileDoc(TypedDict):
    """The model profile the conversation ran on (never a key: the key stays in its variable)."""

    name: Annotated[str, Limits(min_length=1, max_length=80)]
    provider: Annotated[str, Limits(choices_of="provider")]
    model: Annotated[str, _length(120)]
    base_url: Annotated[str, _length(500)]
    demo: bool


class ServerDoc(TypedDict):
    """One MCP server the conversation was given."""

    name: Annotated[str, _length(40)]
    transport: Annotated[str, Limits(choices_of="transport")]


class IntegrityDoc(TypedDict):
    """The conversation's anchor (``conversations.record.integrity``), the id of the key it is under,
    and the export's signature (``integrity.manifest_sign``)."""

    key_id: Annotated[str, _length(64)]
    turns: Annotated[int, Limits(minimum=0)]
    head: Annotated[str, HASH]
    anchor: Annotated[str, HASH]
    signature: NotRequired[JSONDict]


class ConversationDoc(TypedDict):
    """The conversation's own fields; an imported one shows what its file said."""

    id: str
    title: Annotated[str, _length(200)]
    owner: str
    model_profile: ProfileDoc
    paradigm: Annotated[str, Limits(choices_of="paradigm")]
    tool_choice: Annotated[str, Limits(choices=tuple(key for key, _ in TOOL_CHOICE_MODES))]
    tool_choice_name: Annotated[str, _length(200)]
    servers: list[ServerDoc]
    created_at: str
    integrity: NotRequired[IntegrityDoc]


class ExchangeDoc(TypedDict):
    """One raw pair on the wire. Bodies are the exact text sent and received, not parsed JSON."""

    id: int
    seq: Annotated[int, SEQ]
    channel: Annotated[str, Limits(choices=tuple(Exchange.Channel.values))]
    direction: Annotated[str, Limits(choices=tuple(Exchange.Direction.values))]
    label: Annotated[str, _length(200)]
    server: Annotated[str | None, _length(40)]
    jsonrpc_id: Annotated[str | None, _length(64)]
    status: Annotated[str, _length(32)]
    error: str
    started_at: str
    duration_ms: float | None
    request_headers: JSONValue
    request_body: str
    response_headers: JSONValue
    response_body: str
    chain_version: NotRequired[Annotated[int, Limits(minimum=1, maximum=3)]]
    prev_hash: Annotated[str, HASH]
    hash: Annotated[str, HASH]


class StepDoc(TypedDict):
    """One thing the agent did. A ``tool`` step names its ``decide`` step as ``parent``. Each
    of ``calls`` (a model step's parsed calls) carries ``executed_exchange`` (the id of the
    ``tools/call`` exchange that ran it, or null) and ``linked_by`` (``call_id``, ``arguments``
    or null)."""

    id: int
    parent: int | None
    seq: Annotated[int, SEQ]
    kind: Annotated[str, Limits(choices=tuple(Step.Kind.values))]
    status: Annotated[str, Limits(choices=tuple(Step.Status.values))]
    title: Annotated[str, _length(300)]
    prompt: str
    prompt_exact: bool
    prompt_source: Annotated[str, _length(300)]
    tokens: JSONValue
    usage: JSONValue
    text: str
    calls: JSONValue
    diagnostics: JSONValue
    server: Annotated[str | None, _length(40)]
    tool_name: Annotated[str, _length(200)]
    arguments: JSONValue
    result: JSONValue
    is_error: bool
    error: str
    started_at: str
    finished_at: str | None
    exchanges: list[ExchangeDoc]


class TurnDoc(TypedDict):
    """One question and the agent run that answered it, with the tool list it was offered;
    ``exchanges`` are the turn's exchanges that belong to no step."""

    id: int
    seq: Annotated[int, Limits(minimum=1, maximum=2_147_483_647)]
    question: str
    status: Annotated[str, Limits(choices=tuple(Turn.Status.values))]
    answer: str
    error: str
    paradigm: Annotated[str, _length(16)]
    tool_choice: Annotated[str, _length(10)]
    tool_choice_name: Annotated[str, _length(200)]
    model: Annotated[str, _length(120)]
    tools: JSONValue
    transcript: JSONValue
    created_at: str
    started_at: str | None
    finished_at: str | None
    seal: NotRequired[Annotated[str, HASH]]
    seal_steps: NotRequired[list[Annotated[str, Limits(pattern=HASH.pattern, min_length=64)]]]
    seal_rule: NotRequired[Annotated[int, Limits(minimum=0)]]
    steps: list[StepDoc]
    exchanges: list[ExchangeDoc]


class TranscriptDoc(TypedDict):
    """A whole conversation: every turn, step and raw exchange."""

    format: Annotated[str, Limits(choices=(FORMAT,))]
    version: Annotated[int, Limits(choices=READ_VERSIONS)]
    conversation: ConversationDoc
    turns: list[TurnDoc]


# --- what a stored row shows -------------------------------------------------------------------


def iso(value: datetime | None) -> str | None:
    return value.isoformat() if value is not None else None


def profile_doc(profile: ModelProfile) -> ProfileDoc:
    return {
        "name": profile.name,
        "provider": profile.provider,
        "model": profile.model,
        "base_url": profile.base_url,
        "demo": profile.is_demo,
    }


def exchange_doc(exchange: Exchange) -> ExchangeDoc:
    return {
        "id": exchange.pk,
        "seq": exchange.seq,
        "channel": exchange.channel,
        "direction": exchange.direction,
        "label": exchange.label,
        # The name recorded with the exchange (sealed, seal rule 4), not the server row's name now.
        "server": exchange.server_name or (exchange.server.name if exchange.server else None),
        "jsonrpc_id": exchange.jsonrpc_id or None,
        "status": exchange.status,
        "error": exchange.error,
        "started_at": exchange.started_at.isoformat(),
        "duration_ms": exchange.duration_ms,
        "request_headers": exchange.request_headers,
        "request_body": exchange.request_body,
        "response_headers": exchange.response_headers,
        "response_body": exchange.response_body,
        "chain_version": exchange.chain_version,
        "prev_hash": exchange.prev_hash,
        "hash": exchange.hash,
    }


def step_doc(step: Step, exchanges: list[ExchangeDoc], *, server: bool = True) -> StepDoc:
    """``server=False`` leaves the server's name unread (the seal, which does not cover it,
    reads steps without their server rows)."""
    return {
        "id": step.pk,
        "parent": step.parent_id,
        "seq": step.seq,
        "kind": step.kind,
        "status": step.status,
        "title": step.title,
        "prompt": step.prompt,
        "prompt_exact": step.prompt_exact,
        "prompt_source": step.prompt_source,
        "tokens": step.tokens,
        "usage": step.usage,
        "text": step.text,
        "calls": step.calls,
        "diagnostics": step.diagnostics,
        "server": (step.server_name or (step.server.name if step.server else None)) if server else None,
        "tool_name": step.tool_name,
        "arguments": step.arguments,
        "result": step.result,
        "is_error": step.is_error,
        "error": step.error,
        "started_at": step.started_at.isoformat(),
        "finished_at": iso(step.finished_at),
        "exchanges": exchanges,
    }


def turn_doc(turn: Turn, steps: list[StepDoc], exchanges: list[ExchangeDoc]) -> TurnDoc:
    return {
        "id": turn.pk,
        "seq": turn.seq,
        "question": turn.question,
        "status": turn.status,
        "answer": turn.answer,
        "error": turn.error,
        "paradigm": turn.paradigm,
        "tool_choice": turn.tool_choice,
        "tool_choice_name": turn.tool_choice_name,
        "model": turn.model_name,
        "tools": turn.tools,
        "transcript": turn.transcript,
        "created_at": turn.created_at.isoformat(),
        "started_at": iso(turn.started_at),
        "finished_at": iso(turn.finished_at),
        "seal": turn.seal,
        "seal_steps": turn.seal_steps,
        "seal_rule": turn.seal_rule,
        "steps": steps,
        "exchanges": exchanges,
    }


# --- which tools/call ran each call of a model step ----------------------------------------------

# What the document adds to each call of a model step (never stored in the call): the id of the
# ``tools/call`` exchange that ran it (null: none did) and how that was known.
CALL_LINK_KEYS = ("executed_exchange", "linked_by")


def calls_linked(steps: list[StepDoc]) -> None:
    """Give each call of each step of one turn its ``executed_exchange`` and ``linked_by``.

    A call the recording proxy linked names its tool step (``tool_step``, a seq of the same
    turn) and how it was linked (``call_id`` or ``arguments``). A call of the loop's own turns
    was run by its step's child tool steps in order (the loop opens one per call it takes, and
    sends the call's id in the request's ``_meta``): ``call_id``. A tool step with no
    ``tools/call`` exchange (a call refused before it was sent) ran nothing: null, null."""
    by_seq = {step["seq"]: step for step in steps}
    children: dict[int, list[StepDoc]] = {}
    for step in steps:
        if step["parent"] is not None and step["kind"] == Step.Kind.TOOL:
            children.setdefault(step["parent"], []).append(step)
    for step in steps:
        calls = step["calls"]
        if not isinstance(calls, list) or not calls:
            continue
        ran = children.get(step["id"], [])
        linked: list[JSONValue] = []
        for index, call in enumerate(calls):
            if not isinstance(call, dict):
                linked.append(call)
                continue
            tool, how = _call_tool(call, index, ran, by_seq)
            executed = _tools_call_id(tool) if tool is not None else None
            linked.append({**call, "executed_exchange": executed, "linked_by": how if executed else None})
        step["calls"] = linked


def _call_tool(
    call: JSONDict, index: int, ran: list[StepDoc], by_seq: dict[int, StepDoc]
) -> tuple[StepDoc | None, str | None]:
    seq = call.get("tool_step")
    if isinstance(seq, int) and not isinstance(seq, bool):
        how = call.get("linked_by")
        return by_seq.get(seq), how if isinstance(how, str) else None
    if index < len(ran):
        return ran[index], "call_id"
    return None, None


def _tools_call_id(step: StepDoc) -> int | None:
    for exchange in step["exchanges"]:
        if exchange["label"] == "tools/call" and exchange["direction"] == Exchange.Direction.CLIENT:
            return exchange["id"]
    return None


def calls_as_stored(calls: JSONValue) -> JSONValue:
    """A document's calls as their step stores them: without what ``calls_linked`` added (a
    call the proxy linked keeps its own ``linked_by`` with its ``tool_step``)."""
    if not isinstance(calls, list):
        return calls
    stored: list[JSONValue] = []
    for call in calls:
        if isinstance(call, dict):
            drop = {"executed_exchange"} if "tool_step" in call else set(CALL_LINK_KEYS)
            call = {key: value for key, value in call.items() if key not in drop}
        stored.append(call)
    return stored
