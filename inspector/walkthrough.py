"""The step-through of one turn: its rows cut into slides, one layer each (the spliced prompt, the
request, the raw reply, the parsed call, the JSON-RPC request and result, the answer), each with
who talks to whom and what the layer is — for a projector, one slide on screen at a time.

A turn of any size makes a step-through of bounded cost: a reply's calls are shown as its row on
the page shows them (the first and last few, ``selectors.CALLS_HEAD`` and ``CALLS_TAIL``), the
ones between counted on one slide that sends to the page; a turn of many rows is read a page of
rows at a time (``ROWS_PAGE``, as the conversation page reads them: docs/decisions/0130), the
page of the slide on screen; and a slide's body is indented, cut and annotated only when that
slide is shown, never for the whole deck."""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cached_property

from conversations import selectors
from conversations.escaping import carriable
from conversations.models import Exchange, Step, Turn
from inspector import teaching

# A slide shows at most this much of a body (a projector shows far less); the conversation page
# has all of it.
SLIDE_BODY_CHARS = 12_000
# A body longer than this is cut as it is, neither indented nor annotated field by field: both
# parse it whole, and a raw body may be tens of megabytes.
SLIDE_PARSE_CHARS = 1_000_000
# The rows of a turn one page of the step-through reads and numbers its slides in: a turn of
# more has pages (``?page=``), and a turn of thousands of rows costs what one of this many does.
ROWS_PAGE = selectors.ROWS_BATCH


@dataclass
class Slide:
    """One slide. ``text`` is what it shows before it is indented and cut (``body``, ``cut``);
    ``fmt`` the wire format whose field notes it gets (``fields``; "" for none). Both are worked
    out when the slide is shown, so a deck of many slides costs only the one on screen."""

    step_seq: int
    layer: str
    title: str
    roles: teaching.Roles | None
    explanation: str
    text: str = ""
    mark: str = ""  # "select" or "execute": the two moments teaching mode points at
    fmt: str = ""
    # The words of the mark (SELECT; for a call, what happened to it: EXECUTE, NOT EXECUTED…).
    mark_text: str = ""
    # A prompt slide's row: its label (exact, illustrative, as sent), source and token counts.
    prompt_of: Step | None = None

    @cached_property
    def _shown(self) -> tuple[str, bool]:
        return _pretty(self.text)

    @property
    def body(self) -> str:
        return self._shown[0]

    @property
    def cut(self) -> bool:
        return self._shown[1]

    @cached_property
    def fields(self) -> list[teaching.FieldNote]:
        if not self.fmt or len(self.text) > SLIDE_PARSE_CHARS:
            return []
        return teaching.field_notes(self.text, self.fmt)


def _pretty(text: str) -> tuple[str, bool]:
    """The body indented if it is JSON (and not too long to parse), and cut to
    ``SLIDE_BODY_CHARS``; and whether it was cut."""
    if len(text) <= SLIDE_PARSE_CHARS:
        try:
            text = carriable(json.dumps(json.loads(text), indent=2, ensure_ascii=False))
        except (ValueError, RecursionError):  # RecursionError: a body nested thousands deep
            pass
    if len(text) > SLIDE_BODY_CHARS:
        return text[:SLIDE_BODY_CHARS], True
    return text, False


def _exchange_slide(
    step: Step, exchange: Exchange, part: str, *, layer: str, title: str, mark: str = "", mark_text: str = ""
) -> Slide:
    body = exchange.request_body if part == "request" else exchange.response_body
    roles = teaching.exchange_roles(
        channel=exchange.channel,
        direction=exchange.direction,
        label=exchange.label,
        server=exchange.server_name,
    )
    if part == "response":
        roles = teaching.Roles(roles.receiver, roles.sender, f"The reply to {exchange.label}.", roles.spec)
    return Slide(
        step_seq=step.seq,
        layer=layer,
        title=title,
        roles=roles,
        explanation=teaching.LAYERS[layer],
        text=body,
        mark=mark,
        mark_text=mark_text,
        fmt=teaching.body_format(channel=exchange.channel, label=exchange.label),
    )


def _call_text(call: object) -> str:
    if not isinstance(call, dict):
        return ""
    verdict = "valid" if call.get("valid") else "rejected: " + str(call.get("error", ""))
    arguments = call.get("arguments", call.get("arguments_text"))
    return f"{call.get('name')}  {verdict}\n" + json.dumps(arguments, indent=2, ensure_ascii=False)


def _calls_text(calls: list[object]) -> str:
    """The parsed calls of a reply, one paragraph each; of a reply of many, the first and last
    few (as its row shows them) and how many are between."""
    head, tail = selectors.CALLS_HEAD, selectors.CALLS_TAIL
    if len(calls) <= head + tail:
        return "\n\n".join(filter(None, map(_call_text, calls)))
    left = len(calls) - head - tail
    between = f"… {left:,} more calls of this reply (of {len(calls):,}): the conversation page loads them"
    return "\n\n".join(
        [*filter(None, map(_call_text, calls[:head])), between, *filter(None, map(_call_text, calls[-tail:]))]
    )


def _model_slides(step: Step, exchanges: Sequence[Exchange]) -> list[Slide]:
    slides: list[Slide] = []
    host_model = teaching.Roles("Host", "Model", "What the model reads: text, whatever the paradigm.")
    if step.prompt:
        label = teaching.prompt_label(exact=step.prompt_exact, source=step.prompt_source)
        slides.append(
            Slide(
                step.seq,
                "prompt",
                f"#{step.seq} What the model reads"
                if label == "exact"
                else f"#{step.seq} The prompt ({label})",
                host_model,
                teaching.prompt_layer(label),
                step.prompt,
                prompt_of=step,
            )
        )
    for exchange in exchanges:
        choice = teaching.sent_tool_choice(
            exchange.request_body,
            teaching.body_format(channel="llm", label=exchange.label),
            in_words=lambda: teaching.turn_tool_choice(*selectors.tool_choice_in_force(step)),
        )
        title = f"#{step.seq} The request: {exchange.label}" + (f" · tool_choice {choice}" if choice else "")
        slides.append(_exchange_slide(step, exchange, "request", layer="request", title=title))
        slides.append(
            _exchange_slide(step, exchange, "response", layer="response", title=f"#{step.seq} The raw reply")
        )
    if step.calls and isinstance(step.calls, list):
        slides.append(
            Slide(
                step.seq,
                "parsed",
                f"#{step.seq} The model selects",
                teaching.Roles("Model", "Host", teaching.SELECT_NOTE.text, teaching.SELECT_NOTE.spec),
                teaching.LAYERS["parsed"],
                _calls_text(step.calls),
                mark="select",
                mark_text="SELECT",
            )
        )
    return slides


def _call_slides(step: Step, child: Step) -> list[Slide]:
    """The slides of one selected call (the tool step ``child``), marked with what its record
    says happened to it (``teaching.call_outcome``, as its row on the page is): a call the host
    refused was never sent, so its slide says that, not what a ``tools/call`` does."""
    exchanges = list(child.exchanges.all())
    sent = any(e.channel == "mcp" and e.label == "tools/call" for e in exchanges)
    outcome = teaching.call_outcome(
        status=child.status, error=child.error, is_error=child.is_error, sent=sent
    )
    mark_text, note = teaching.call_note(outcome)
    slides: list[Slide] = []
    for exchange in exchanges:
        if exchange.channel != "mcp" or exchange.label == "stderr":
            continue
        call = exchange.label == "tools/call"
        slides.append(
            _exchange_slide(
                step,
                exchange,
                "request",
                layer="rpc_request",
                title=f"#{step.seq} The host executes: {exchange.label}",
                mark="execute" if call else "",
                mark_text=mark_text if call else "",
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
    if outcome == "refused":
        slides.append(
            Slide(
                step.seq,
                "refused",
                f"#{step.seq} Not executed: {child.title}",
                teaching.Roles("Host", "Model", note.text, note.spec),
                "The host's reason, which goes back to the model as the call's result:",
                child.error,
                mark_text=mark_text,
            )
        )
    elif child.error and not exchanges:
        slides.append(
            Slide(
                step.seq,
                "error",
                f"#{step.seq} No exchange recorded: {child.title}",
                teaching.Roles("Host", "Model", note.text, note.spec),
                teaching.LAYERS["error"],
                child.error,
                mark_text=mark_text,
            )
        )
    return slides


def _tool_slides(step: Step) -> list[Slide]:
    """The slides of a row's tool calls: of a row of many (``selectors.turn_rows`` loads only
    its first and last few), those it loaded, and one slide between that counts the others."""
    children = selectors.loaded_calls(step)
    total = max(getattr(step, selectors.CALLS_COUNT, 0), len(children))
    head = children[: selectors.CALLS_HEAD] if total > len(children) else children
    slides = [slide for child in head for slide in _call_slides(step, child)]
    if total > len(children):
        left = total - len(children)
        slides.append(
            Slide(
                step.seq,
                "rpc_request",
                f"#{step.seq} … {left:,} more tool calls of this reply",
                teaching.Roles("Host", "Server", teaching.EXECUTE_NOTE.text, teaching.EXECUTE_NOTE.spec),
                teaching.LAYERS["rpc_request"],
                f"This reply asked for {total:,} tool calls. The step-through shows the first "
                f"{selectors.CALLS_HEAD} and the last {selectors.CALLS_TAIL}; the {left:,} between "
                "are on the conversation page, which loads them on request.",
            )
        )
        slides.extend(
            slide for child in children[selectors.CALLS_HEAD :] for slide in _call_slides(step, child)
        )
    return slides


def turn_slides(rows: Sequence[Step], *, more_after: bool = False) -> list[Slide]:
    """Every slide of a turn, in the order things happened, from its rows as
    ``selectors.turn_rows`` loads them (a row of many tool calls with only its first and last);
    or of a page of its rows, ``more_after`` saying whether rows follow the page's."""
    slides: list[Slide] = []
    for step in rows:
        exchanges = selectors.loaded_exchanges(step)
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
            went_on = (
                any(later.seq > step.seq for later in rows)
                or more_after
                or (None if step.turn.status not in step.turn.FINISHED else False)
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


@dataclass
class Deck:
    """The slides of one page of a turn's rows, and where the slide on screen stands in it."""

    slides: list[Slide]
    page: int  # from 1
    pages: int
    at: int  # the slide on screen, from 1 (0: the page has none)
    rows: int  # the turn's rows in all
    first_row: int  # the page's first and last rows, numbered from 1 in the turn
    last_row: int

    @property
    def slide(self) -> Slide | None:
        return self.slides[self.at - 1] if self.at else None

    def _query(self, page: int, at: int | str) -> str:
        return f"?at={at}" if page == 1 else f"?page={page}&at={at}"

    @property
    def previous(self) -> str | None:
        """The query of the slide before (the previous page's last), or None at the first."""
        if self.at > 1:
            return self._query(self.page, self.at - 1)
        return self._query(self.page - 1, "last") if self.page > 1 else None

    @property
    def next(self) -> str | None:
        """The query of the slide after (the next page's first), or None at the last."""
        if self.at < len(self.slides):
            return self._query(self.page, self.at + 1)
        return self._query(self.page + 1, 1) if self.page < self.pages else None


def turn_deck(turn: Turn, *, page: int, at: int | None) -> Deck:
    """Page ``page`` (from 1; past the last: the last) of the turn's step-through, with its slide
    ``at`` on screen (from 1; None: its last). Reads that page's rows alone (``ROWS_PAGE``)."""
    page = max(page, 1)
    read = selectors.turn_rows_page(turn=turn, start=(page - 1) * ROWS_PAGE, size=ROWS_PAGE)
    pages = max(1, -(-read.total // ROWS_PAGE))
    if page > pages:  # past the turn's last page (a link of before its rows changed): the last
        page = pages
        read = selectors.turn_rows_page(turn=turn, start=(page - 1) * ROWS_PAGE, size=ROWS_PAGE)
    slides = turn_slides(read.rows, more_after=read.more)
    shown = len(slides) if at is None else at
    first_row = (page - 1) * ROWS_PAGE + 1
    return Deck(
        slides=slides,
        page=page,
        pages=pages,
        at=min(max(shown, 1), len(slides)),
        rows=read.total,
        first_row=first_row,
        last_row=first_row + len(read.rows) - 1,
    )
