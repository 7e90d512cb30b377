"""Where a turn's pooled MCP session was opened: a later turn that reuses a session records no
handshake of its own, so its connect row links to the ``initialize`` (or ``server/discover``)
exchange of the earlier turn that opened that session — or says the session was opened outside
this conversation, where the handshake cannot be shown to this conversation's readers.

A session is the same when the same process (``Turn.runner``) reports the same pooled-session
generation for the same server to the same asker (sessions are pooled per server and OAuth
grant, and generations counted per process, so the runner's name and the asker are part of the
match). Where no such turn is found, the row says so rather than guess.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import NamedTuple

from conversations.models import Exchange, Step

HANDSHAKES = ("initialize", "server/discover")


@dataclass(frozen=True)
class Origin:
    server: str
    generation: int
    turn_seq: int | None = None  # the turn of this conversation that opened the session
    turn_id: int | None = None
    exchange_id: int | None = None  # its handshake exchange


class _Connect(NamedTuple):
    """An earlier connect step, as much of it as ``session_origins`` reads."""

    pk: int
    result: object
    turn_id: int
    turn_seq: int


def _opened(result: object) -> dict[str, dict[str, object]]:
    """The sessions a connect step's ``result`` names, by server."""
    sessions = result if isinstance(result, dict) else {}
    return {name: info for name, info in sessions.items() if isinstance(info, dict)}


def session_origins(step: Step) -> list[Origin]:
    """For each server whose session ``step`` (a connect step) reused, where it was opened."""
    reused: dict[str, int] = {}
    for name, info in _opened(step.result).items():
        generation = info.get("generation")
        if not info.get("spawned") and isinstance(generation, int):
            reused[name] = generation
    if not reused:
        return []
    turn = step.turn
    earlier: list[_Connect] = []
    # A conversation's first turn has none before it (turns are numbered from 1): nothing to read.
    if turn.runner and turn.seq > 1:
        # As values, not steps: every closed connect row a page or a doorbell renders asks this
        # (P2's first row, once its step is closed), and the four values are all it uses.
        earlier = [
            _Connect(*values)
            for values in Step.objects.filter(
                turn__conversation_id=turn.conversation_id,
                turn__seq__lt=turn.seq,
                turn__runner=turn.runner,
                turn__asked_by_id=turn.asked_by_id,
                kind=Step.Kind.CONNECT,
            )
            .order_by("-turn__seq")
            .values_list("pk", "result", "turn_id", "turn__seq")
        ]
    origins = []
    for name, generation in sorted(reused.items()):
        opener = next(
            (
                candidate
                for candidate in earlier
                if _opened(candidate.result).get(name, {}).get("spawned")
                and _opened(candidate.result)[name].get("generation") == generation
            ),
            None,
        )
        if opener is None:
            origins.append(Origin(name, generation))
            continue
        handshake = (
            Exchange.objects.filter(step_id=opener.pk, server_name=name, label__in=HANDSHAKES)
            .order_by("seq")
            .values_list("pk", flat=True)
            .first()
        )
        origins.append(Origin(name, generation, opener.turn_seq, opener.turn_id, handshake))
    return origins
