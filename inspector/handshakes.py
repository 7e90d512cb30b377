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

from conversations.models import Exchange, Step

HANDSHAKES = ("initialize", "server/discover")


@dataclass(frozen=True)
class Origin:
    server: str
    generation: int
    turn_seq: int | None = None  # the turn of this conversation that opened the session
    turn_id: int | None = None
    exchange_id: int | None = None  # its handshake exchange


def _sessions(step: Step) -> dict[str, dict[str, object]]:
    result = step.result if isinstance(step.result, dict) else {}
    return {name: info for name, info in result.items() if isinstance(info, dict)}


def session_origins(step: Step) -> list[Origin]:
    """For each server whose session ``step`` (a connect step) reused, where it was opened."""
    reused: dict[str, int] = {}
    for name, info in _sessions(step).items():
        generation = info.get("generation")
        if not info.get("spawned") and isinstance(generation, int):
            reused[name] = generation
    if not reused:
        return []
    turn = step.turn
    earlier = []
    if turn.runner:
        earlier = list(
            Step.objects.filter(
                turn__conversation_id=turn.conversation_id,
                turn__seq__lt=turn.seq,
                turn__runner=turn.runner,
                turn__asked_by_id=turn.asked_by_id,
                kind=Step.Kind.CONNECT,
            )
            .order_by("-turn__seq")
            .only("pk", "result", "turn_id", "turn__seq")
            .select_related("turn")
        )
    origins = []
    for name, generation in sorted(reused.items()):
        opener = next(
            (
                candidate
                for candidate in earlier
                if _sessions(candidate).get(name, {}).get("spawned")
                and _sessions(candidate)[name].get("generation") == generation
            ),
            None,
        )
        if opener is None:
            origins.append(Origin(name, generation))
            continue
        handshake = (
            Exchange.objects.filter(step=opener, server_name=name, label__in=HANDSHAKES)
            .order_by("seq")
            .values_list("pk", flat=True)
            .first()
        )
        origins.append(Origin(name, generation, opener.turn.seq, opener.turn_id, handshake))
    return origins
