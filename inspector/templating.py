"""The template engine every page and live fragment is rendered with: Django's, with one rule
added — no hidden character reaches the browser able to act.

A template shows a record's text through ``revealed`` or ``payload``, which mark each invisible or
bidirectional character (``conversations.escaping.HIDDEN``) with a row note; a value a template
shows plainly (``{{ x }}``) or in an attribute would keep it, and a right-to-left override would
reorder what follows on the page. So whatever a template renders is checked once more here: each
hidden character left in text becomes the same visible marker, and in an attribute (a tooltip, a
label) or a ``<title>`` the plain ``⟨U+XXXX⟩``. What a browser sends back or a script reads as
data keeps its characters as stored: an editable field (a ``<textarea>``, an input's ``value``),
``data-*`` attributes, and ``<script>`` and ``<style>`` contents. A page without a hidden
character (nearly all) costs one scan and is returned as rendered.

Django's documented extension point for this is a template backend (``TEMPLATES["BACKEND"]``):
``RevealingTemplates`` is ``DjangoTemplates`` whose templates render through ``page_revealed``.
"""

from __future__ import annotations

import re
from typing import Any

from django.http import HttpRequest
from django.template.backends.django import DjangoTemplates, Template
from django.utils.safestring import SafeString, mark_safe

from conversations.escaping import hidden_characters, hidden_marked, hidden_revealed

# What a rendered page is made of, for this purpose: elements whose contents are data or a form
# field's value (kept), the title (plain markers), comments (kept), and tags (their attributes).
_PARTS = re.compile(
    r"<(?P<raw>script|style|textarea)\b[^>]*>.*?</(?P=raw)\s*>"
    r"|<title\b[^>]*>(?P<title>.*?)</title\s*>"
    r"|<!--.*?-->"
    r"|<[^>]*>",
    re.DOTALL | re.IGNORECASE,
)
_ATTRIBUTE = re.compile(r"""([^\s"'=<>/]+)(\s*=\s*)("[^"]*"|'[^']*'|[^\s"'>]+)""")


def _attribute(match: re.Match[str]) -> str:
    name = match.group(1).lower()
    if name == "value" or name.startswith("data-"):
        return match.group()
    return match.group(1) + match.group(2) + hidden_marked(match.group(3))


def _part(match: re.Match[str]) -> str:
    part = match.group()
    if match.group("raw") or part.startswith("<!--"):
        return part
    if match.group("title") is not None:
        return hidden_marked(part)
    return _ATTRIBUTE.sub(_attribute, part)


def page_revealed(html: str) -> str:
    """Rendered HTML with every hidden character marked where it would show (see the module's
    docstring); the same text when it holds none."""
    if not hidden_characters(html):
        return html
    out: list[str] = []
    position = 0
    for match in _PARTS.finditer(html):
        out.append(hidden_revealed(html[position : match.start()]))
        out.append(_part(match))
        position = match.end()
    out.append(hidden_revealed(html[position:]))
    return "".join(out)


class RevealingTemplate(Template):
    """A template of ``RevealingTemplates``: the Django backend's, rendered through
    ``page_revealed``."""

    def render(self, context: dict[str, Any] | None = None, request: HttpRequest | None = None) -> SafeString:
        return mark_safe(page_revealed(super().render(context, request)))


class RevealingTemplates(DjangoTemplates):
    """Django's template backend whose templates mark hidden characters (``page_revealed``)."""

    def from_string(self, template_code: str) -> Template:
        return RevealingTemplate(super().from_string(template_code).template, self)

    def get_template(self, template_name: str) -> Template:
        return RevealingTemplate(super().get_template(template_name).template, self)
