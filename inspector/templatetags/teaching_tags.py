"""Template helpers of teaching mode and of the user's display preferences.

The teaching layer is rendered only for a user who has teaching mode on (``teaching`` in the
context: the context processor :func:`inspector.preferences.teaching_context` sets it for a page,
:mod:`inspector.fragments` for a row the websocket sends), so a page without it carries none of
its weight; docs/teaching.md §1. Notes are static text of :mod:`inspector.teaching`; field names come from recorded bodies
and are escaped like any payload.
"""

from __future__ import annotations

from django import template
from django.http import HttpRequest
from django.utils.safestring import SafeString, mark_safe

from conversations import selectors
from conversations.models import Exchange, Step, Turn, UserPreference
from inspector import teaching
from inspector.preferences import request_preferences

register = template.Library()

# A body bigger than this is not walked for its field names (the page stays fast; the
# step-through shows the fields of any body).
FIELDS_LIMIT_CHARS = 256 * 1024


@register.simple_tag(takes_context=True)
def user_preferences(context: template.Context) -> UserPreference:
    request = context.get("request")
    if isinstance(request, HttpRequest):
        return request_preferences(request)
    return UserPreference()


def teaching_on(context: template.Context) -> bool:
    """Whether this rendering carries the teaching layer: the context's ``teaching`` if it says,
    else the signed-in user's preference, else no."""
    if "teaching" in context:
        return bool(context["teaching"])
    request = context.get("request")
    return isinstance(request, HttpRequest) and request_preferences(request).teaching


def _server_name(exchange: Exchange) -> str:
    return exchange.server_name or (exchange.server.name if exchange.server_id and exchange.server else "")


@register.inclusion_tag("inspector/_teach_roles.html", takes_context=True)
def teach_roles(context: template.Context, exchange: Exchange) -> dict[str, object]:
    if not teaching_on(context):
        return {"on": False}
    roles = teaching.exchange_roles(
        channel=exchange.channel,
        direction=exchange.direction,
        label=exchange.label,
        server=_server_name(exchange),
    )
    return {"on": True, "roles": roles}


@register.inclusion_tag("inspector/_teach_fields.html", takes_context=True)
def teach_fields(context: template.Context, exchange: Exchange, part: str) -> dict[str, object]:
    if not teaching_on(context):
        return {"on": False}
    body = exchange.request_body if part == "request" else exchange.response_body
    fmt = teaching.body_format(channel=exchange.channel, label=exchange.label)
    too_big = len(body) > FIELDS_LIMIT_CHARS
    return {
        "on": True,
        "fields": [] if too_big else teaching.field_notes(body, fmt),
        "too_big": too_big,
        "fmt": fmt,
        "part": part,
        # Kept open when a live update replaces the row (the page's scripts match it by key).
        "key": f"ex-{exchange.pk}-{part}-fields",
    }


@register.filter(is_safe=True)
def note(text: object) -> SafeString:
    """A note's text as HTML: escaped first, then its few Markdown marks as tags
    (:func:`inspector.teaching.note_html`)."""
    return mark_safe(teaching.note_html(str(text)))


@register.filter
def step_note(step: Step) -> str:
    """What this row is; for an error row, whether its turn went on after it, read from the
    record (a later row), or ended with it."""
    went_on: bool | None = None
    if step.kind == Step.Kind.ERROR:
        if Step.objects.filter(turn_id=step.turn_id, seq__gt=step.seq).exists():
            went_on = True
        elif step.turn.status in Turn.FINISHED:
            went_on = False
    return teaching.step_note(step.kind, went_on=went_on)


@register.filter
def layer_note(layer: str) -> str:
    return teaching.LAYERS.get(layer, "")


@register.simple_tag
def select_note() -> teaching.Note:
    return teaching.SELECT_NOTE


@register.simple_tag
def call_note(child: Step) -> dict[str, str]:
    """The mark and note of what happened to a selected call (its tool step ``child``), chosen
    from the record: executed, refused before sending, failed, cancelled or still running."""
    sent = any(e.channel == Exchange.Channel.MCP and e.label == "tools/call" for e in child.exchanges.all())
    outcome = teaching.call_outcome(
        status=child.status, error=child.error, is_error=child.is_error, sent=sent
    )
    mark, note = teaching.call_note(outcome)
    return {"outcome": outcome, "mark": mark, "text": note.text, "spec": note.spec}


@register.filter
def tool_choice_sent(exchange: Exchange, step: Step) -> str:
    """The tool_choice value a model request carried (for the row's head); for a paradigm's
    request without the field, the one it ran under, which its prompt says in words
    (``selectors.tool_choice_in_force``: read only for such a request)."""
    if exchange.channel != "llm" or len(exchange.request_body) > FIELDS_LIMIT_CHARS:
        return ""
    return teaching.sent_tool_choice(
        exchange.request_body,
        teaching.body_format(channel=exchange.channel, label=exchange.label),
        in_words=lambda: teaching.turn_tool_choice(*selectors.tool_choice_in_force(step)),
    )


@register.inclusion_tag("inspector/_teach_legend.html", takes_context=True)
def teach_legend(context: template.Context) -> dict[str, object]:
    if not teaching_on(context):
        return {"on": False}
    return {"on": True, "roles": list(teaching.ROLES.items())}


@register.inclusion_tag("inspector/_teach_fields.html", takes_context=True)
def teach_fragment_fields(
    context: template.Context, fragments: list[tuple[str, str]] | None, fmt: str, part: str
) -> dict[str, object]:
    """The field notes of a piece cut from a body (the compare view's wire columns): the piece is
    read as JSON, or as the members of an object when it is a run of ``"key": value`` pairs."""
    if not teaching_on(context):
        return {"on": False}
    text = "".join(piece for piece, _ in fragments or [])
    notes = teaching.field_notes(text, fmt) or teaching.field_notes("{" + text.strip().rstrip(",") + "}", fmt)
    return {"on": True, "fields": notes, "too_big": False, "fmt": fmt, "part": part}
