"""Template helpers of teaching mode and of the user's display preferences.

The teaching layer is rendered into every row whatever the preference (so a row that streamed in
is the row a reload shows) and shown by the stylesheet only when the page's ``data-teaching`` is
``on``. Notes are static text of :mod:`inspector.teaching`; field names come from recorded bodies
and are escaped like any payload.
"""

from __future__ import annotations

from django import template
from django.http import HttpRequest

from conversations.models import Exchange, UserPreference
from inspector import teaching
from inspector.preferences import preference_get

register = template.Library()

# A body bigger than this is not walked for its field names (the page stays fast; the
# step-through shows the fields of any body).
FIELDS_LIMIT_CHARS = 256 * 1024


@register.simple_tag(takes_context=True)
def user_preferences(context: template.Context) -> UserPreference:
    request = context.get("request")
    if isinstance(request, HttpRequest) and hasattr(request, "user"):
        return preference_get(user=request.user)
    return UserPreference()


def _server_name(exchange: Exchange) -> str:
    return exchange.server_name or (exchange.server.name if exchange.server_id and exchange.server else "")


@register.inclusion_tag("inspector/_teach_roles.html")
def teach_roles(exchange: Exchange) -> dict[str, object]:
    roles = teaching.exchange_roles(
        channel=exchange.channel,
        direction=exchange.direction,
        label=exchange.label,
        server=_server_name(exchange),
    )
    return {"roles": roles}


@register.inclusion_tag("inspector/_teach_fields.html")
def teach_fields(exchange: Exchange, part: str) -> dict[str, object]:
    body = exchange.request_body if part == "request" else exchange.response_body
    fmt = teaching.body_format(channel=exchange.channel, label=exchange.label)
    too_big = len(body) > FIELDS_LIMIT_CHARS
    return {
        "fields": [] if too_big else teaching.field_notes(body, fmt),
        "too_big": too_big,
        "fmt": fmt,
        "part": part,
    }


@register.filter
def step_note(kind: str) -> str:
    return teaching.STEP_NOTES.get(kind, "")


@register.filter
def layer_note(layer: str) -> str:
    return teaching.LAYERS.get(layer, "")


@register.simple_tag
def select_note() -> teaching.Note:
    return teaching.SELECT_NOTE


@register.simple_tag
def execute_note() -> teaching.Note:
    return teaching.EXECUTE_NOTE


@register.filter
def tool_choice_sent(exchange: Exchange) -> str:
    """The tool_choice value a model request carried (for the row's head)."""
    if exchange.channel != "llm" or len(exchange.request_body) > FIELDS_LIMIT_CHARS:
        return ""
    return teaching.sent_tool_choice(
        exchange.request_body, teaching.body_format(channel=exchange.channel, label=exchange.label)
    )


@register.inclusion_tag("inspector/_teach_legend.html")
def teach_legend() -> dict[str, object]:
    return {"roles": list(teaching.ROLES.items())}


@register.inclusion_tag("inspector/_teach_fields.html")
def teach_fragment_fields(fragments: list[tuple[str, str]] | None, fmt: str, part: str) -> dict[str, object]:
    """The field notes of a piece cut from a body (the compare view's wire columns): the piece is
    read as JSON, or as the members of an object when it is a run of ``"key": value`` pairs."""
    text = "".join(piece for piece, _ in fragments or [])
    notes = teaching.field_notes(text, fmt) or teaching.field_notes("{" + text.strip().rstrip(",") + "}", fmt)
    return {"fields": notes, "too_big": False, "fmt": fmt, "part": part}
