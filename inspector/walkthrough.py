"""The step-through of one turn: its rows cut into slides, one layer each (the spliced prompt, the
request, the raw reply, the parsed call, the JSON-RPC request and result, the answer), each with
who talks to whom and what the layer is — for a projector, one slide on screen at a time."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass, field

from conversations.escaping import carriable
from conversations.models import Exchange, Step
from inspector import teaching

# A slide shows at most this much of a body (a projector shows far less); the conversation page
# has all of it.
SLIDE_BODY_CHARS = 12_000


@dataclass(frozen=True)
class Slide:
    step_seq: int
    layer: str
    title: str
    roles: teaching.Roles | None
    explanation: str
    body: str = ""
    cut: bool = False
    mark: str = ""  # "select" or "execute": the two moments teaching mode points at
    fields: list[teaching.FieldNote] = field(default_factory=list)


def _pretty(text: str) -> tuple[str, bool]:
    """The body indented if it is JSON, and cut to ``SLIDE_BODY_CHARS``; and whether it was cut."""
    try:
        text = carriable(json.dumps(json.loads(text), indent=2, ensure_ascii=False))
    except (ValueError, RecursionError):  # RecursionError: a body nested thousands deep
        pass
    if len(text) > SLIDE_BODY_CHARS:
        return text[:SLIDE_BODY_CHARS], True
    return text, False


def _exchange_slide(
    step: Step, exchange: Exchange, part: str, *, layer: str, title: str, mark: str = ""
) -> Slide:
    body = exchange.request_body if part == "request" else exchange.response_body
    fmt = teaching.body_format(channel=exchange.channel, label=exchange.label)
    roles = teaching.exchange_roles(
        channel=exchange.channel,
        direction=exchange.direction,
        label=exchange.label,
        server=exchange.server_name,
    )
    if part == "response":
        roles = teaching.Roles(roles.receiver, roles.sender, f"The reply to {exchange.label}.", roles.spec)
    text, cut = _pretty(body)
    return Slide(
        step_seq=step.seq,
        layer=layer,
        title=title,
        roles=roles,
        explanation=teaching.LAYERS[layer],
        body=text,
        cut=cut,
        mark=mark,
        fields=teaching.field_notes(body, fmt),
    )


def _model_slides(step: Step, exchanges: Sequence[Exchange]) -> list[Slide]:
    slides: list[Slide] = []
    host_model = teaching.Roles("Host", "Model", "What the model reads: text, whatever the paradigm.")
    if step.prompt:
        text, cut = _pretty(step.prompt)
        slides.append(
            Slide(
                step.seq,
                "prompt",
                f"#{step.seq} What the model reads",
                host_model,
                teaching.LAYERS["prompt"],
                text,
                cut,
            )
        )
    for exchange in exchanges:
        choice = teaching.sent_tool_choice(
            exchange.request_body,
            teaching.body_format(channel="llm", label=exchange.label),
            in_words=teaching.turn_tool_choice(step.turn.tool_choice, step.turn.tool_choice_name),
        )
        title = f"#{step.seq} The request: {exchange.label}" + (f" · tool_choice {choice}" if choice else "")
        slides.append(_exchange_slide(step, exchange, "request", layer="request", title=title))
        slides.append(
            _exchange_slide(step, exchange, "response", layer="response", title=f"#{step.seq} The raw reply")
        )
    if step.calls:
        calls = "\n\n".join(
            f"{call.get('name')}  {'valid' if call.get('valid') else 'rejected: ' + str(call.get('error', ''))}\n"
            + json.dumps(call.get("arguments", call.get("arguments_text")), indent=2, ensure_ascii=False)
            for call in step.calls
            if isinstance(call, dict)
        )
        slides.append(
            Slide(
                step.seq,
                "parsed",
                f"#{step.seq} The model selects",
                teaching.Roles("Model", "Host", teaching.SELECT_NOTE.text, teaching.SELECT_NOTE.spec),
                teaching.LAYERS["parsed"],
                calls,
                mark="select",
            )
        )
    return slides


def _tool_slides(step: Step) -> list[Slide]:
    slides: list[Slide] = []
    for child in step.children.all():
        for exchange in child.exchanges.all():
            if exchange.channel != "mcp" or exchange.label == "stderr":
                continue
            mark = "execute" if exchange.label == "tools/call" else ""
            slides.append(
                _exchange_slide(
                    step,
                    exchange,
                    "request",
                    layer="rpc_request",
                    title=f"#{step.seq} The host executes: {exchange.label}",
                    mark=mark,
                )
            )
            slides.append(
                _exchange_slide(
                    step,
                    exchange,
                    "response",
                    layer="rpc_result",
                    title=f"#{step.seq} The result of {child.title}",
                )
            )
        if child.error and not child.exchanges.all():
            slides.append(
                Slide(
                    step.seq,
                    "rpc_request",
                    f"#{step.seq} Not executed: {child.title}",
                    None,
                    teaching.LAYERS["rpc_request"],
                    child.error,
                )
            )
    return slides


def turn_slides(rows: Sequence[Step]) -> list[Slide]:
    """Every slide of a turn, in the order things happened."""
    slides: list[Slide] = []
    for step in rows:
        exchanges = list(step.exchanges.all())
        llm = [exchange for exchange in exchanges if exchange.channel == "llm"]
        if step.kind == "connect":
            listing = [
                e
                for e in exchanges
                if e.channel == "mcp" and e.label in {"tools/list", "initialize", "server/discover"}
            ]
            if listing:
                slides.extend(
                    _exchange_slide(
                        step,
                        exchange,
                        "response",
                        layer="connect",
                        title=f"#{step.seq} Connect: {exchange.label}",
                    )
                    for exchange in listing
                )
            else:
                roles = teaching.Roles("Client", "Server", teaching.STEP_NOTES["connect"])
                slides.append(
                    Slide(
                        step.seq,
                        "connect",
                        f"#{step.seq} Connect",
                        roles,
                        teaching.LAYERS["connect"],
                        step.text,
                    )
                )
        elif step.kind == "answer":
            slides.extend(_model_slides(step, llm))
            roles = teaching.Roles("Model", "Host", teaching.STEP_NOTES["answer"])
            slides.append(
                Slide(
                    step.seq,
                    "answer",
                    f"#{step.seq} The final answer",
                    roles,
                    teaching.LAYERS["answer"],
                    step.text,
                )
            )
        elif step.kind in {"fallback", "error"}:
            # An error row is told from what the record says came next (docs/teaching.md §3).
            went_on = any(later.seq > step.seq for later in rows) or (
                None if step.turn.status not in step.turn.FINISHED else False
            )
            roles = teaching.Roles("Host", "Host", teaching.step_note(step.kind, went_on=went_on))
            slides.append(
                Slide(
                    step.seq,
                    step.kind,
                    f"#{step.seq} {step.title}",
                    roles,
                    teaching.LAYERS[step.kind],
                    step.text or step.error,
                )
            )
        else:
            slides.extend(_model_slides(step, llm))
            slides.extend(_tool_slides(step))
    return slides
