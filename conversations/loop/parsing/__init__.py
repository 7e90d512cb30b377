"""Tolerant readers for tool calls that a model wrote as plain text.

When tools are taught in the prompt instead of through a native tool API, the reply is text
that should hold calls in the taught convention. Models get it nearly right: code fences,
truncation, invented results, Python-flavoured JSON, calls in their reasoning, closing tags
inside file contents. These readers accept what a careful human reader would, and report each
liberty taken as a diagnostic that the page shows beside the raw text. None of them raises,
whatever the input.

Diagnostic wording: one lowercase clause without a final period, prefixed by its subject —
``"<tool>: …"`` about a call, ``"<tool>.<param>: …"`` about one argument, no prefix about the
reply as a whole. Fixed key phrases make them searchable: "empty reply", "code fence",
"truncated", "invented result", "<think>", "repaired", "not among the offered tools",
"not in the schema", "read … as …" (a value coerced), "ambiguous".

The readers, one module each: :mod:`~conversations.loop.parsing.xml_calls` (the XML convention),
:mod:`~conversations.loop.parsing.json_calls` (the JSON convention), :mod:`~conversations.loop.parsing.labels`
(intent labels), over :mod:`~conversations.loop.parsing.arguments` (tolerant JSON loading and schema
coercion) and :mod:`~conversations.loop.parsing.text` (the result types and the text around calls).
"""

from conversations.loop.parsing.arguments import coerce_arguments
from conversations.loop.parsing.json_calls import parse_json_reply
from conversations.loop.parsing.labels import parse_label
from conversations.loop.parsing.text import ParsedCall, ParseResult
from conversations.loop.parsing.xml_calls import parse_xml_calls

__all__ = [
    "ParseResult",
    "ParsedCall",
    "coerce_arguments",
    "parse_json_reply",
    "parse_label",
    "parse_xml_calls",
]
