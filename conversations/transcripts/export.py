"""Transcripts out: the export formats, their media types, and the text of a conversation in each.

The formats are described in ``conversations.transcripts.document`` (``json``, ``jsonl``) and
``conversations.transcripts.otel`` (``otel``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Literal

from conversations.escaping import carriable
from conversations.models import Conversation
from conversations.transcripts.document import export_json, export_jsonl, transcript_document
from conversations.transcripts.fields import TranscriptDoc
from conversations.transcripts.otel import export_otel

ExportFormat = Literal["json", "jsonl", "otel"]
EXPORT_FORMATS: tuple[ExportFormat, ...] = ("json", "jsonl", "otel")
MEDIA_TYPES: dict[ExportFormat, str] = {
    "json": "application/json",
    "jsonl": "application/jsonl",
    "otel": "application/json",
}


EXPORTERS: dict[ExportFormat, Callable[[TranscriptDoc], str]] = {
    "json": export_json,
    "jsonl": export_jsonl,
    "otel": export_otel,
}


def transcript_export(*, conversation: Conversation, fmt: ExportFormat) -> str:
    """The conversation as text in ``fmt`` (see this module's docstring); the same bytes every time.

    Raises:
        ValueError: an unknown format.
    """
    exporter = EXPORTERS.get(fmt)
    if exporter is None:
        raise ValueError(f"unknown export format {fmt!r}; choose one of {', '.join(EXPORT_FORMATS)}")
    # Whatever a stored value holds (a lone surrogate read back from SQLite's JSON), the export is
    # text every file and terminal can carry.
    return carriable(exporter(transcript_document(conversation=conversation, signed=fmt == "json")))
