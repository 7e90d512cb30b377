"""Which ``tools/call`` ran which tool call a model asked for.

By the call id when the host carried it: ``params._meta["tool-call-inspector/call_id"]`` of the
``tools/call`` request equals the id of the model's call (``linked_by: "call_id"``). Else by the
tool's name as the host namespaced it (``mcp__time__get_current_time``, ``time_get_current_time``
or ``get_current_time`` for the server ``time``'s tool ``get_current_time``) and equal arguments:
the first such ``tools/call`` after the reply (``linked_by: "arguments"``). A ``tools/call`` that
names the id of a call of its turn is linked by that id only.

A link is kept on both sides: the model step's call gets ``linked_by`` and ``tool_step`` (the
seq of the tool step in the same turn) and the tool step becomes the model step's child, as a
loop's tool step is.
"""

from __future__ import annotations

import json
import re
from collections.abc import Collection
from dataclasses import dataclass
from typing import Any

from django.utils import timezone

from conversations.loop.wire import CALL_ID_META_KEY
from conversations.models import Exchange, Step, Turn
from conversations.typealias import JSONDict, JSONValue

_SEPARATORS = re.compile(r"[^a-z0-9]+")


def _normal(name: str) -> str:
    return _SEPARATORS.sub("", name.lower())


def name_matches(called: str, *, server: str, tool: str, server_tools: Collection[str]) -> bool:
    """Whether a model's call named ``called`` can be the server's tool ``tool``: the same name,
    or the name behind a prefix that ends in a separator and names the server (``mcp__time__``,
    ``time_``, ``time.``) or is the host's ``mcp`` marker. A name that is itself another tool of
    the server never is."""
    if called == tool:
        return True
    if called in server_tools or not called.endswith(tool):
        return False
    prefix = called[: -len(tool)]
    if not prefix or prefix[-1].isalnum():
        return False
    marker = _normal(prefix)
    return marker in {_normal(server), "mcp" + _normal(server), "mcp", ""} or (
        bool(_normal(server)) and marker.endswith(_normal(server))
    )


def call_id_of(request_body: str) -> str | None:
    """The model call id a ``tools/call`` request carries in its ``_meta``, if any."""
    try:
        message = json.loads(request_body)
    except (ValueError, RecursionError):
        return None
    params = message.get("params") if isinstance(message, dict) else None
    meta = params.get("_meta") if isinstance(params, dict) else None
    found = meta.get(CALL_ID_META_KEY) if isinstance(meta, dict) else None
    return found if isinstance(found, str) and found else None


@dataclass
class _Tool:
    step: Step
    call_id: str | None
    used: bool = False
    claimed: bool = False


def _arguments(value: JSONValue) -> JSONValue:
    return {} if value is None else value


def link_turn(turn: Turn, *, tools: dict[str, list[str]]) -> list[tuple[int, dict[str, Any]]]:
    """Link the turn's unlinked tool steps to its model steps' unlinked calls; returns the step
    updates to write, ``(step id, fields)``. ``tools``: each server's tool names."""
    # Every record of a session runs this, under the session's lock: what it reads must not grow
    # with the replies already stored. Only model steps that asked for calls are read (a turn of
    # text replies reads no row), only once a tool step waits for its link (a session of MCP
    # traffic alone reads no tool step), and of each only the columns a match compares (a model
    # step holds its reply's text and prompt).
    pending = [
        step
        for step in Step.objects.filter(turn=turn, kind=Step.Kind.DECIDE)
        .exclude(calls=[])
        .order_by("seq")
        .only("id", "seq", "started_at", "calls")
        if isinstance(step.calls, list) and any(_unlinked(call) for call in step.calls)
    ]
    if not pending:
        return []
    loose = list(
        Step.objects.filter(turn=turn, kind=Step.Kind.TOOL, parent__isnull=True)
        .order_by("seq")
        .only("id", "seq", "started_at", "server_name", "tool_name", "arguments")
    )
    if not loose:
        return []
    bodies = dict(
        Exchange.objects.filter(step__in=loose, label="tools/call", direction=Exchange.Direction.CLIENT)
        .order_by("seq")
        .values_list("step_id", "request_body")
    )
    candidates = _Candidates([_Tool(step, call_id_of(bodies.get(step.pk, ""))) for step in loose], tools)
    # A tools/call that names a call of this turn is linked to that call only.
    asked = {call.get("id") for step in pending for call in step.calls if isinstance(call, dict)}
    for tool in candidates.all:
        tool.claimed = tool.call_id is not None and tool.call_id in asked
    now = timezone.now()
    updates: list[tuple[int, dict[str, Any]]] = []
    for decide in pending:
        calls = list(decide.calls)
        changed = False
        for index, call in enumerate(calls):
            if not _unlinked(call):
                continue
            found, how = candidates.match(call, decide)
            if found is None:
                continue
            found.used = True
            calls[index] = {**call, "linked_by": how, "tool_step": found.step.seq}
            updates.append((found.step.pk, {"parent_id": decide.pk, "updated_at": now}))
            changed = True
        if changed:
            updates.append((decide.pk, {"calls": calls, "updated_at": now}))
    return updates


def _unlinked(call: JSONValue) -> bool:
    return isinstance(call, dict) and not call.get("linked_by")


class _Candidates:
    """A turn's loose tool steps, indexed by the call id their tools/call carries and by the tool
    they ran, so that a call is matched against the steps of the tools its name can be, not
    every loose step (calls to a host's own tools never link and stay loose all turn)."""

    def __init__(self, tools: list[_Tool], server_tools: dict[str, list[str]]) -> None:
        self.all = tools
        self.known = {server: frozenset(names) for server, names in server_tools.items()}
        self.by_id: dict[str, list[_Tool]] = {}
        self.by_tool: dict[tuple[str, str], list[_Tool]] = {}
        for tool in tools:  # in seq order
            if tool.call_id is not None:
                self.by_id.setdefault(tool.call_id, []).append(tool)
            self.by_tool.setdefault((tool.step.server_name, tool.step.tool_name), []).append(tool)

    def match(self, call: JSONDict, decide: Step) -> tuple[_Tool | None, str]:
        """The loose step that ran ``call`` of ``decide``, and how it was found: by the call id,
        else the first step after the reply of a tool the call's name can be, with equal
        arguments."""
        call_id = call.get("id")
        for tool in self.by_id.get(call_id, ()) if isinstance(call_id, str) else ():
            if not tool.used:
                return tool, "call_id"
        name = str(call.get("name") or "")
        arguments = _arguments(call.get("arguments"))
        first: _Tool | None = None
        for (server, tool_name), steps in self.by_tool.items():
            if not name_matches(name, server=server, tool=tool_name, server_tools=self.known.get(server, ())):
                continue
            for tool in steps:
                step = tool.step
                if tool.used or tool.claimed or step.started_at < decide.started_at:
                    continue
                if arguments == _arguments(step.arguments):
                    if first is None or step.seq < first.step.seq:
                        first = tool
                    break
        return (first, "arguments") if first is not None else (None, "")
