"""Template helpers for the inspector: payload rendering, exchange grouping, token counts, small formats.

Payloads come from models, MCP servers and tools, so they are untrusted. The only markup
these helpers mark safe is Pygments output (Pygments escapes every token) or text passed
through :func:`django.utils.html.escape` first.
"""

from __future__ import annotations

import json
import threading
from collections import OrderedDict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django import template
from django.conf import settings
from django.db.models import Count, Max, Min, Q, Sum
from django.template.context import Context
from django.template.defaultfilters import filesizeformat
from django.urls import reverse
from django.utils.html import conditional_escape, escape
from django.utils.safestring import SafeString, mark_safe
from pygments import highlight
from pygments.formatters import HtmlFormatter
from pygments.lexers import JsonLexer

from conversations.escaping import carriable, hidden_characters, hidden_marked, hidden_revealed
from conversations.limits import Limit, profile_limits
from conversations.loop.paradigms import PARADIGMS
from conversations.loop.providers import USAGE_INPUT_KEYS, USAGE_OUTPUT_KEYS
from conversations.models import Conversation, Exchange, ModelProfile, Step, TraceDelivery, Turn
from conversations.presentation import PromptChange, pretty_json, step_prompt_change
from conversations.pricing import (
    MILLION,
    Cost,
    comparison_cost,
    profile_price,
    step_cost,
    tool_definitions_cost,
    turn_cost,
)
from conversations.selectors import (
    CALLS_HEAD,
    CALLS_TAIL,
    EXCHANGES_HEAD,
    RunSummary,
    exchanges_left,
    loaded_exchanges,
    turn_trace_delivery,
)
from conversations.typealias import JSONValue
from inspector.fragments import timestamp_iso
from inspector.handshakes import Origin, session_origins
from inspector.waterfall import HEAD_BARS, TAIL_BARS, WATERFALL_FIELDS, Waterfall, turn_waterfall
from servers.selectors import step_app_uri

register = template.Library()

# Beyond either limit a payload starts collapsed, so one huge result does not bury the row.
COLLAPSE_LINES = 40
COLLAPSE_BYTES = 4096
# Highlighting is linear but slow per token; past this a body is shown escaped, uncoloured.
HIGHLIGHT_LIMIT_CHARS = 200_000
# A raw body bigger than this is shown as a preview of its first PREVIEW_CHARS characters,
# with a button that loads the rest (a few such bodies would otherwise make the page crawl;
# on a long conversation every model call has two: its request and its spliced prompt).
PREVIEW_THRESHOLD_BYTES = 64 * 1024
# Bodies shown whole are kept rendered, per process, up to this many characters in all (the
# body and its markup): a live row is rendered again at every change of its step, and a
# server's initialize and tools/list answers are the same in every turn.
SHOWN_CACHE_CHARS = 8 * 1024 * 1024
PREVIEW_CHARS = 4 * 1024
OUTLINE_MAX_CHARS = 140
OUTLINE_STRING_CHARS = 24

_FORMATTER = HtmlFormatter(nowrap=True)
_LEXER = JsonLexer()


def _as_text(value: JSONValue) -> tuple[str, bool]:
    """A stored body (exact text) or a decoded JSON value, as display text; and whether it is JSON."""
    if isinstance(value, str):
        text, is_json = pretty_json(value)
        return carriable(text), is_json
    return carriable(json.dumps(value, indent=2, ensure_ascii=False)), True


def _markup(text: str, is_json: bool) -> SafeString:
    """``text`` as markup, every hidden character marked (``hidden_revealed``)."""
    if is_json and len(text) <= HIGHLIGHT_LIMIT_CHARS:
        # Pygments escapes &, <, > and quotes in every token it emits.
        html: str = highlight(text, _LEXER, _FORMATTER)
    else:
        html = escape(text)
    return mark_safe(hidden_revealed(html))


@register.filter
def revealed(value: object) -> SafeString:
    """A value shown as text: escaped, every invisible or bidirectional character shown as a
    marked ``⟨U+XXXX⟩`` (``conversations.escaping.hidden_revealed``). Every field a page shows of
    a record goes through it (or through ``payload``, which does the same)."""
    return mark_safe(hidden_revealed(conditional_escape(value if isinstance(value, str) else str(value))))


@register.filter
def marked(value: object) -> str:
    """A value shown where no markup can go (a ``<title>``, an attribute): its hidden characters
    written ``⟨U+XXXX⟩`` as plain text (autoescaped as usual)."""
    return hidden_marked(str(value))


def _hidden_in(value: object) -> bool:
    if isinstance(value, str):
        return hidden_characters(value)
    if value is None or isinstance(value, bool | int | float):
        return False
    return hidden_characters(json.dumps(value, ensure_ascii=False, default=str))


@register.filter
def step_hidden(step: Step) -> bool:
    """Whether anything a step's row shows of the step itself holds a hidden character (its
    bodies are flagged where they are shown, by ``payload``)."""
    calls = step.calls if isinstance(step.calls, list) else []
    # Of a reply of thousands of calls the row shows the first and last few (``paging_tags``);
    # the ones loaded on request carry their own note where their arguments are shown.
    if len(calls) > CALLS_HEAD + CALLS_TAIL:
        calls = [*calls[:CALLS_HEAD], *calls[-CALLS_TAIL:]]
    shown = (step.title, step.text, step.error, step.diagnostics, calls)
    return any(_hidden_in(value) for value in shown) or any(
        _hidden_in(value) for value in (step.tool_name, step.server_name, step.arguments, step.result)
    )


@register.filter
def turn_hidden(turn: Turn) -> bool:
    """Whether a turn's question or answer holds a hidden character."""
    return _hidden_in(turn.question) or _hidden_in(turn.answer)


def _hint(value: JSONValue) -> str:
    if isinstance(value, dict):
        return "{…}" if value else "{}"
    if isinstance(value, list):
        return f"[{len(value)}]"
    if isinstance(value, str) and len(value) > OUTLINE_STRING_CHARS:
        return '"…"'
    return json.dumps(value, ensure_ascii=False)


def outline(text: str) -> str:
    """A one-line sketch of a JSON document's top level, e.g. ``{"model": "demo", "tools": [4]}``.

    It is what a collapsed body shows, so its shape is readable without opening it.
    """
    try:
        value = json.loads(text)
    except (ValueError, RecursionError):
        return ""
    if isinstance(value, list):
        return f"[{len(value)} items]"
    if not isinstance(value, dict):
        return ""
    sketch = ""
    for index, (key, item) in enumerate(value.items()):
        part = f"{json.dumps(key, ensure_ascii=False)}: {_hint(item)}"
        if index and len(sketch) + len(part) > OUTLINE_MAX_CHARS:
            return carriable("{" + sketch + ", …}")
        sketch = f"{sketch}, {part}" if index else part
    return carriable("{" + sketch + "}")


def is_long(text: str) -> bool:
    """Whether a payload should start collapsed."""
    return text.count("\n") + 1 > COLLAPSE_LINES or len(text.encode("utf-8")) > COLLAPSE_BYTES


@register.filter
def app_uri(step: Step, parent: Step) -> str:
    """The ``ui://`` MCP App of the tool a tool step called (``""``: it has none); the turn's
    tools are read once per row, through the parent step."""
    return step_app_uri(step=step, tools=parent.turn.tools)


@dataclass(frozen=True)
class _Shown:
    """A body as ``payload`` shows it, whatever row it is in: its markup and its measures."""

    html: SafeString
    is_json: bool
    long: bool
    outline: str
    lines: int
    size: int
    hidden: bool


def _shown_now(value: JSONValue) -> _Shown:
    text, is_json = _as_text(value)
    long = is_long(text)
    return _Shown(
        html=_markup(text, is_json),
        is_json=is_json,
        long=long,
        outline=outline(text) if long and is_json else "",
        lines=text.count("\n") + 1,
        size=len(text.encode("utf-8")),
        hidden=hidden_characters(text),
    )


class _ShownCache:
    """Rendered bodies by their exact text, least recently used dropped first, within
    ``SHOWN_CACHE_CHARS``. What is shown depends on the text alone, so any row holding the same
    text may take it; one thread at a time changes the order."""

    def __init__(self) -> None:
        self._entries: OrderedDict[str, _Shown] = OrderedDict()
        self._chars = 0
        self._lock = threading.Lock()

    def get(self, text: str) -> _Shown:
        with self._lock:
            shown = self._entries.get(text)
            if shown is not None:
                self._entries.move_to_end(text)
                return shown
        shown = _shown_now(text)
        weight = len(text) + len(shown.html)
        if weight > SHOWN_CACHE_CHARS // 8:
            return shown
        with self._lock:
            if text not in self._entries:
                self._entries[text] = shown
                self._chars += weight
            while self._chars > SHOWN_CACHE_CHARS:
                dropped, old = self._entries.popitem(last=False)
                self._chars -= len(dropped) + len(old.html)
        return shown

    def clear(self) -> None:
        with self._lock:
            self._entries.clear()
            self._chars = 0


_shown_cache = _ShownCache()


def _shown(value: JSONValue) -> _Shown:
    return _shown_cache.get(value) if isinstance(value, str) else _shown_now(value)


@register.filter
def highlight_json(value: JSONValue) -> SafeString:
    """``value`` pretty-printed and syntax-highlighted if it is JSON, else escaped as it is."""
    return _shown(value).html


def _export_url(conversation: object) -> str:
    """Where the whole record of the page's conversation downloads from ("": no conversation)."""
    if not isinstance(conversation, Conversation):
        return ""
    return reverse("inspector-conversation-export", args=[conversation.public_id]) + "?format=json"


def _display_size(value: JSONValue) -> tuple[int, str]:
    """How many characters ``value`` has as stored text (a body as it is, a JSON value compact),
    and that text when it is not the value itself."""
    if isinstance(value, str):
        return len(value), value
    text = carriable(json.dumps(value, ensure_ascii=False))
    return len(text), text


def display_cut(value: JSONValue, *, key: str, url: str = "") -> dict[str, object] | None:
    """What ``_json.html`` shows for a value longer than ``DISPLAY_MAX_CHARS`` characters: its
    first ones as stored (escaped, not parsed nor highlighted), marked with the whole size and,
    with ``url``, a link to the exact record; None for a shorter value."""
    limit = settings.DISPLAY_MAX_CHARS
    size, text = _display_size(value)
    if size <= limit:
        return None
    shown = text[:limit]
    return {
        "is_empty": False,
        "html": mark_safe(hidden_revealed(escape(shown))),
        "hidden": hidden_characters(shown),
        "is_json": False,
        "looks_json": not isinstance(value, str) or text.lstrip()[:1] in {"{", "["},
        "collapsed": True,
        "outline": "",
        "lines": text.count("\n") + 1,
        "size": filesizeformat(len(text.encode("utf-8"))),
        "key": key,
        "cut": {"shown": limit, "total": size, "url": url},
    }


@register.inclusion_tag("inspector/_json.html", takes_context=True, name="payload")
def payload_tag(
    context: Context, value: JSONValue, *key_parts: object, empty: str = "—", expanded: bool = False
) -> dict[str, object]:
    """``{% payload value key... %}``: ``payload``, linking a cut to the page's conversation."""
    return payload(
        value, *key_parts, empty=empty, expanded=expanded, conversation=context.get("conversation")
    )


def payload(
    value: JSONValue,
    *key_parts: object,
    empty: str = "—",
    expanded: bool = False,
    conversation: object = None,
) -> dict[str, object]:
    """One body for display: highlighted, and collapsed behind a size summary when long
    (unless ``expanded``); past ``DISPLAY_MAX_CHARS`` characters cut (``display_cut``), with a
    link to ``conversation``'s whole record when there is one.

    ``key_parts`` name the ``<details>`` (joined with ``-``) so the page can keep it open
    when the row around it is re-rendered live.
    """
    key = "-".join(str(part) for part in key_parts)
    if value is not None and value != "":
        cut = display_cut(value, key=key, url=_export_url(conversation))
        if cut is not None:
            return cut
    return _payload(value, key, empty=empty, expanded=expanded)


def _payload(value: JSONValue, key: str, *, empty: str = "—", expanded: bool = False) -> dict[str, object]:
    """``payload`` for a value within ``DISPLAY_MAX_CHARS``."""
    if value is None or value == "":
        return {"is_empty": True, "empty": empty}
    shown = _shown(value)
    collapsed = not expanded and shown.long
    return {
        "is_empty": False,
        "html": shown.html,
        "is_json": shown.is_json,
        "collapsed": collapsed,
        "outline": shown.outline if collapsed else "",
        "lines": shown.lines,
        "size": filesizeformat(shown.size),
        "hidden": shown.hidden,
        "key": key,
    }


@register.inclusion_tag("inspector/_text.html", takes_context=True)
def long_text(context: Context, value: str) -> dict[str, object]:
    """A text shown as prose (an answer, a model's text): whole up to ``DISPLAY_MAX_CHARS``
    characters, else its first ones and the mark of the cut."""
    limit = settings.DISPLAY_MAX_CHARS
    if len(value) <= limit:
        return {"text": value}
    return {
        "text": value[:limit],
        "cut": {"shown": limit, "total": len(value), "url": _export_url(context.get("conversation"))},
    }


def _body_url(exchange: Exchange, part: str, conversation: Conversation | None) -> str:
    """Where the full body is fetched from (the conversation is looked up if not at hand)."""
    if conversation is None:
        conversation = Conversation.objects.get(turns__exchanges=exchange)
    url = reverse("inspector-exchange-body", args=[conversation.public_id, exchange.pk])
    return f"{url}?part={part}"


@register.inclusion_tag("inspector/_json.html")
def exchange_body(
    exchange: Exchange, part: str, conversation: object = None, *, empty: str = "—"
) -> dict[str, object]:
    """An exchange's raw ``request`` or ``response`` body, as ``payload`` shows it; a body over
    ``PREVIEW_THRESHOLD_BYTES`` shows only its first ``PREVIEW_CHARS`` characters (highlighted)
    and a button that loads the whole of it from the exchange-body view.

    ``conversation`` is the page's (anything else: it is looked up, for a fragment rendered alone).
    """
    body = exchange.request_body if part == "request" else exchange.response_body
    size = len(body.encode("utf-8"))
    if size <= min(PREVIEW_THRESHOLD_BYTES, settings.DISPLAY_MAX_CHARS):
        return _payload(body, f"ex-{exchange.pk}-{part}", empty=empty)
    owner = conversation if isinstance(conversation, Conversation) else None
    return _preview(body, size, key=f"ex-{exchange.pk}-{part}", url=_body_url(exchange, part, owner))


def _preview(body: str, size: int, *, key: str, url: str) -> dict[str, object]:
    """What ``_json.html`` shows for a body too big to render whole: its first ``PREVIEW_CHARS``
    characters as stored (escaped, not parsed, pretty-printed nor highlighted: on a long
    conversation that work on every big body was most of the page's time) and a button that
    loads the whole body, pretty-printed, from ``url``."""
    shown = body[:PREVIEW_CHARS]
    return {
        "is_empty": False,
        "html": mark_safe(hidden_revealed(escape(shown))),
        "hidden": hidden_characters(shown),
        "is_json": False,
        "looks_json": body.lstrip()[:1] in {"{", "["},
        "collapsed": True,
        "outline": "",
        "lines": body.count("\n") + 1,
        "size": filesizeformat(size),
        "key": key,
        # Past DISPLAY_MAX_CHARS the whole body is not rendered into the page: the raw link is.
        "preview": {
            "shown": filesizeformat(len(shown.encode("utf-8"))),
            "url": url,
            "whole": len(body) <= settings.DISPLAY_MAX_CHARS,
        },
    }


@register.inclusion_tag("inspector/_json.html")
def prompt_body(step: Step, conversation: object = None) -> dict[str, object]:
    """A step's spliced prompt, as ``exchange_body`` shows a raw body: whole up to
    ``PREVIEW_THRESHOLD_BYTES``, else a preview and a button that loads the rest."""
    size = len(step.prompt.encode("utf-8"))
    if size <= min(PREVIEW_THRESHOLD_BYTES, settings.DISPLAY_MAX_CHARS):
        return _payload(step.prompt, f"step-{step.pk}-prompt-body")
    if not isinstance(conversation, Conversation):
        conversation = Conversation.objects.get(turns__steps=step)
    url = reverse("inspector-step-prompt", args=[conversation.public_id, step.pk])
    return _preview(step.prompt, size, key=f"step-{step.pk}-prompt-body", url=f"{url}?part=prompt")


@register.filter
def llm_exchanges(step: Step) -> list[Exchange]:
    """The model calls of a step (its exchanges as loaded: ``selectors.loaded_exchanges``)."""
    return [e for e in loaded_exchanges(step) if e.channel == Exchange.Channel.LLM]


@register.filter
def mcp_exchanges(step: Step) -> list[Exchange]:
    """The JSON-RPC messages of a step, notifications and stderr included (as loaded: of a step
    of many, its first and last, ``exchanges_cut``)."""
    return [e for e in loaded_exchanges(step) if e.channel == Exchange.Channel.MCP]


@register.filter
def exchanges_cut(step: Step) -> dict[str, int] | None:
    """Where the messages a step's page leaves out go among its JSON-RPC messages (``at``: after
    that many of them) and how many they are (``left``); None for a step shown whole."""
    left = exchanges_left(step)
    if not left:
        return None
    head = loaded_exchanges(step)[:EXCHANGES_HEAD]
    return {"at": sum(1 for e in head if e.channel == Exchange.Channel.MCP), "left": left}


@register.filter
def duration(milliseconds: float | int | None) -> str:
    """A duration for people: ``850 ms``, ``2.4 s``, ``1 min 5 s``; ``—`` when unknown."""
    if milliseconds is None:
        return "—"
    if milliseconds < 1000:
        return f"{milliseconds:.0f} ms"
    seconds = milliseconds / 1000
    if seconds < 60:
        return f"{seconds:.1f} s"
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


@register.filter
def limits(profile: ModelProfile) -> list[Limit]:
    """The limits of a profile's turns, each its own or the global setting's."""
    return profile_limits(profile)


@register.filter
def startswith(value: str, prefix: str) -> bool:
    return isinstance(value, str) and value.startswith(prefix)


@register.filter
def iso(moment: object) -> str:
    """The sortable timestamp format of the live messages (see ``inspector.fragments``)."""
    return timestamp_iso(moment) if isinstance(moment, datetime) else ""


@register.filter
def paradigm_label(key: str) -> str:
    paradigm = PARADIGMS.get(key)
    return paradigm.label if paradigm is not None else key


@register.filter
def trace_delivery(turn: Turn) -> TraceDelivery | None:
    """The turn's trace to the OTLP collector, None for none (``selectors.turn_trace_delivery``)."""
    return turn_trace_delivery(turn)


@register.filter
def turn_duration(turn: Turn) -> str:
    """How long a finished turn ran; empty while it has not both started and finished."""
    if turn.started_at is None or turn.finished_at is None:
        return ""
    return duration((turn.finished_at - turn.started_at).total_seconds() * 1000)


@register.filter
def tone(status: str) -> str:
    """A CSS tone for a free-form status (HTTP code, ok / error / timeout, a step status)."""
    value = status.strip().lower()
    if not value:
        return "neutral"
    if value.isdigit():
        return "ok" if value.startswith(("1", "2", "3")) else "error"
    if value in {"ok", "done"}:
        return "ok"
    if value in {"running", "queued", "pending"}:
        return "busy"
    return "error"


@dataclass(frozen=True)
class TokenCounts:
    """A step's ``tokens`` record, ready to show; counts are None where none was made.

    Without an offline encoding for the model there are no counts, only ``note`` saying why:
    the page never shows an estimate.
    """

    encoding: str
    prompt: int | None
    tools: list[tuple[str, int]]
    tools_total: int
    results: list[int]
    note: str

    @property
    def counted(self) -> bool:
        return bool(self.encoding) and self.prompt is not None


def _whole(value: JSONValue) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


@register.filter
def token_counts(step: Step) -> TokenCounts | None:
    """The token counts recorded with a step's spliced prompt; None if it recorded nothing."""
    tokens = step.tokens if isinstance(step.tokens, dict) else {}
    if not tokens:
        return None
    raw_tools = tokens.get("tools")
    tools = [
        (str(name), count)
        for name, value in (raw_tools.items() if isinstance(raw_tools, dict) else [])
        if (count := _whole(value)) is not None
    ]
    raw_results = tokens.get("results")
    results = [
        count
        for value in (raw_results if isinstance(raw_results, list) else [])
        if (count := _whole(value)) is not None
    ]
    return TokenCounts(
        encoding=str(tokens.get("encoding") or ""),
        prompt=_whole(tokens.get("prompt")),
        tools=tools,
        tools_total=sum(count for _, count in tools),
        results=results,
        note=str(tokens.get("note") or ""),
    )


@dataclass(frozen=True)
class Usage:
    """The provider's own count of a call's tokens in and out (None where it did not say)."""

    tokens_in: int | None
    tokens_out: int | None
    total: int | None


def _first_count(usage: dict[str, JSONValue], keys: tuple[str, ...]) -> int | None:
    return next((count for key in keys if (count := _whole(usage.get(key))) is not None), None)


@register.filter
def usage(step: Step) -> Usage | None:
    """The usage the provider reported for a step's model call; None if it reported none."""
    report = step.usage if isinstance(step.usage, dict) else {}
    found = Usage(
        tokens_in=_first_count(report, USAGE_INPUT_KEYS),
        tokens_out=_first_count(report, USAGE_OUTPUT_KEYS),
        total=_first_count(report, ("total_tokens", "totalTokenCount")),
    )
    return None if found == Usage(None, None, None) else found


@register.filter
def prompt_change(step: Step) -> PromptChange | None:
    """How the spliced prompt changed since the turn's previous model call, in summary (one
    query, no line diff: the page loads that when it is opened)."""
    return step_prompt_change(step=step)


@register.filter
def count(value: int | float | None) -> str:
    """A count with thousands separators; ``—`` when unknown."""
    if value is None:
        return "—"
    return f"{value:,.0f}"


@register.filter
def call_cost(step: Step, conversation: Conversation) -> Cost | None:
    """What a model call cost at its profile's prices (None: no price set, or no usage)."""
    return step_cost(step, conversation.model_profile)


@register.filter
def turn_total_cost(turn: Turn, conversation: Conversation) -> Cost | None:
    return turn_cost(turn, conversation.model_profile)


@register.filter
def unpriced(profile: ModelProfile) -> bool:
    """Whether the costs of this profile's calls cannot be shown because no price is set."""
    return profile_price(profile) is None


@register.filter
def run_cost(run: RunSummary) -> Cost | None:
    """What one comparison run's turn cost at its profile's prices."""
    return None if run.turn is None else turn_cost(run.turn, run.conversation.model_profile)


@register.filter
def run_tool_definitions_cost(run: RunSummary) -> Decimal | None:
    """What one run's tool definitions (each tool as its paradigm writes it into the request) cost as input."""
    return tool_definitions_cost(run.turn, run.conversation.model_profile)


@register.filter
def runs_cost(runs: list[RunSummary]) -> Decimal | None:
    """What the whole comparison cost: the sum of its runs' costs."""
    return comparison_cost([(run.turn, run.conversation.model_profile) for run in runs])


@register.filter
def tool_definitions_call_cost(step: Step, conversation: Conversation) -> Decimal | None:
    """What one model call's tool definitions cost as input."""
    price = profile_price(conversation.model_profile)
    counts = token_counts(step)
    if price is None or price.input_per_million is None or counts is None or not counts.tools_total:
        return None
    return price.input_per_million * counts.tools_total / MILLION


@register.filter
def turn_tool_definitions_cost(turn: Turn, conversation: Conversation) -> Decimal | None:
    return tool_definitions_cost(turn, conversation.model_profile)


@register.filter
def dollars(value: Decimal) -> str:
    """A cost in US dollars with enough digits to tell small calls apart."""
    return f"${value:.6f}" if value < 1 else f"${value:,.2f}"


@register.filter
def waterfall(turn: Turn) -> Waterfall | None:
    """The turn's timeline, reading only what a bar shows (a step's prompt, bodies and results
    are most of its row), each step with the time its own wire exchanges took (summed in the same
    query): one query, but for a turn of thousands of calls, whose first and last bars only are
    read (and how many there are, and when they began and ended)."""
    timed = (
        Step.objects.filter(turn=turn, finished_at__isnull=False)
        .exclude(kind=Step.Kind.FALLBACK)
        .only(*WATERFALL_FIELDS)
    )
    on_wire = ~Q(exchanges__direction=Exchange.Direction.LOCAL) & Q(exchanges__duration_ms__isnull=False)
    drawn_steps = timed.annotate(
        wire_start=Min("exchanges__started_at", filter=on_wire),
        wire_ms=Sum("exchanges__duration_ms", filter=on_wire),
    )
    drawn = HEAD_BARS + TAIL_BARS
    first = list(drawn_steps.order_by("started_at", "seq")[: drawn + 1])
    left_out, span = 0, None
    if len(first) > drawn:
        counted = timed.aggregate(count=Count("pk"), start=Min("started_at"), end=Max("finished_at"))
        tail = list(drawn_steps.order_by("-started_at", "-seq")[:TAIL_BARS])
        first = [*first[:HEAD_BARS], *reversed(tail)]
        left_out, span = counted["count"] - drawn, (counted["start"], counted["end"])
    timings = [
        (step.pk, step.wire_start, step.wire_ms)
        for step in first
        if getattr(step, "wire_ms", None) is not None
    ]
    return turn_waterfall(first, timings, left_out=left_out, span=span)


@register.filter
def handshake_origins(step: Step) -> list[Origin]:
    """Where each session a connect step reused was opened (:mod:`inspector.handshakes`)."""
    return session_origins(step) if step.kind == Step.Kind.CONNECT and step.status != "running" else []
