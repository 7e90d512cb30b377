"""Template helpers of the workbench: result content blocks, shown safely.

Everything a server sends is untrusted. Images and audio become ``data:`` URLs only for a short
list of media types browsers cannot execute (no SVG, no HTML), and only when the payload is
plain base64; everything else is shown as escaped text by the template.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, replace
from typing import Any

from django import template

from conversations.loop.wire import MASK
from servers.mcp_apps import is_app_label
from servers.vault import is_sealed

register = template.Library()

SAFE_IMAGE_TYPES = frozenset(
    {"image/png", "image/jpeg", "image/gif", "image/webp", "image/avif", "image/bmp"}
)
SAFE_AUDIO_TYPES = frozenset(
    {
        "audio/wav",
        "audio/x-wav",
        "audio/wave",
        "audio/mpeg",
        "audio/mp3",
        "audio/ogg",
        "audio/webm",
        "audio/flac",
        "audio/aac",
        "audio/mp4",
    }
)
_BASE64_RE = re.compile(r"^[A-Za-z0-9+/]*={0,2}$")
TEXT_PREVIEW_CHARS = 20_000


@dataclass(frozen=True)
class Block:
    """One content block, ready for the template: ``kind`` picks how it is drawn."""

    kind: str  # text, image, audio, media-refused, resource_link, resource-text, resource-blob, unknown
    text: str = ""
    mime: str = ""
    src: str = ""
    uri: str = ""
    name: str = ""
    note: str = ""
    raw: str = ""
    # The block's annotations (audience, priority, lastModified) as one line, if it has any.
    annotations: str = ""


def _text_blob(mime: str, data: Any) -> str | None:
    """A ``text/*`` blob decoded for reading (the template escapes it), or None."""
    if not mime.lower().startswith("text/") or not isinstance(data, str):
        return None
    try:
        return base64.b64decode(data, validate=False).decode("utf-8")
    except (binascii.Error, ValueError):
        return None


def _annotations(item: dict[str, Any]) -> str:
    annotations = item.get("annotations")
    if not isinstance(annotations, dict):
        return ""
    parts = []
    audience = annotations.get("audience")
    if isinstance(audience, list):
        parts.append(f"audience: {', '.join(str(who) for who in audience)}")
    if isinstance(annotations.get("priority"), int | float):
        parts.append(f"priority {annotations['priority']:g}")
    if annotations.get("lastModified"):
        parts.append(f"last modified {annotations['lastModified']}")
    parts.extend(
        f"{key}: {json.dumps(value, ensure_ascii=False)}"
        for key, value in annotations.items()
        if key not in {"audience", "priority", "lastModified"}
    )
    return " · ".join(parts)


def _media_src(mime: str, data: Any, allowed: frozenset[str]) -> tuple[str, str]:
    """A data: URL for safe media, else ("", why not)."""
    kind = mime.split(";")[0].strip().lower()
    if kind not in allowed:
        return "", f"{mime or 'no media type'} is not shown inline (only {', '.join(sorted(allowed))})"
    if not isinstance(data, str) or not _BASE64_RE.match(data.replace("\n", "")):
        return "", "the data is not plain base64"
    try:
        base64.b64decode(data, validate=False)
    except (binascii.Error, ValueError):
        return "", "the data is not valid base64"
    return f"data:{kind};base64,{data.replace(chr(10), '')}", ""


def _block(item: Any) -> Block:
    if not isinstance(item, dict):
        return Block("unknown", raw=json.dumps(item, ensure_ascii=False))
    return replace(_plain_block(item), annotations=_annotations(item))


def _plain_block(item: dict[str, Any]) -> Block:
    kind = str(item.get("type", ""))
    mime = str(item.get("mimeType") or "")
    if kind == "text":
        return Block("text", text=str(item.get("text", "")))
    if kind in {"image", "audio"}:
        allowed = SAFE_IMAGE_TYPES if kind == "image" else SAFE_AUDIO_TYPES
        src, note = _media_src(mime, item.get("data"), allowed)
        size = len(str(item.get("data") or "")) * 3 // 4
        return Block(kind if src else "media-refused", mime=mime, src=src, note=note or f"{size:,} bytes")
    if kind == "resource_link":
        return Block(
            "resource_link",
            uri=str(item.get("uri", "")),
            name=str(item.get("title") or item.get("name") or ""),
            mime=mime,
            text=str(item.get("description") or ""),
        )
    if kind == "resource":
        raw_resource = item.get("resource")
        resource: dict[str, Any] = raw_resource if isinstance(raw_resource, dict) else {}
        uri = str(resource.get("uri", ""))
        mime = str(resource.get("mimeType") or "")
        if "text" in resource:
            return Block("resource-text", uri=uri, mime=mime, text=str(resource["text"])[:TEXT_PREVIEW_CHARS])
        text = _text_blob(mime, resource.get("blob"))
        if text is not None:
            return Block(
                "resource-text", uri=uri, mime=f"{mime}, base64 blob decoded", text=text[:TEXT_PREVIEW_CHARS]
            )
        src, note = _media_src(mime, resource.get("blob"), SAFE_IMAGE_TYPES)
        size = len(str(resource.get("blob") or "")) * 3 // 4
        return Block("resource-blob", uri=uri, mime=mime, src=src, note=note or f"{size:,} bytes")
    return Block("unknown", raw=json.dumps(item, ensure_ascii=False, indent=2))


@register.filter
def content_blocks(value: Any) -> list[Block]:
    """The ``content`` of a tool result, or the ``contents`` of a resource read, as blocks."""
    if not isinstance(value, dict):
        return []
    if isinstance(value.get("contents"), list):
        # resources/read: each item is a resource body.
        return [_block({"type": "resource", "resource": item}) for item in value["contents"]]
    content = value.get("content")
    return [_block(item) for item in content] if isinstance(content, list) else []


@register.filter
def prompt_messages(value: Any) -> list[tuple[str, Block]]:
    """A prompts/get result's messages as (role, block)."""
    messages = value.get("messages") if isinstance(value, dict) else None
    return [
        (str(message.get("role", "")), _block(message.get("content")))
        for message in (messages if isinstance(messages, list) else [])
        if isinstance(message, dict)
    ]


@register.filter
def shown_value(value: Any) -> str:
    """A stored env/header value as a page may show it."""
    text = str(value)
    return MASK if is_sealed(text) else text


@register.filter
def app_traffic(label: str) -> bool:
    """Whether a transcript row is a postMessage message between an MCP App and the host page."""
    return is_app_label(label)


@register.filter
def pretty(value: Any) -> str:
    return json.dumps(value, indent=2, ensure_ascii=False)


@register.filter
def hint_badges(annotations: Any) -> list[tuple[str, str]]:
    """Tool annotation hints as (label, tone) badges."""
    if not isinstance(annotations, dict):
        return []
    labels = {
        "readOnlyHint": "read-only",
        "destructiveHint": "destructive",
        "idempotentHint": "idempotent",
        "openWorldHint": "open world",
    }
    return [
        (
            labels[key] if value else f"not {labels[key]}",
            "error" if key == "destructiveHint" and value else "neutral",
        )
        for key, value in annotations.items()
        if key in labels and isinstance(value, bool)
    ]


@register.filter
def http_status(exchange: Any) -> str:
    """The HTTP status a transport recorded with a JSON-RPC message (empty for stdio)."""
    headers = getattr(exchange, "response_headers", None)
    return str(headers.get(":status", "")) if isinstance(headers, dict) else ""


@register.filter
def web_url(value: Any) -> str:
    """A server-chosen URL fit for a link: http(s) only (no ``javascript:``, ``data:``...), else ""."""
    text = str(value or "").strip()
    return text if re.match(r"^https?://[^\s]+$", text, re.IGNORECASE) else ""


@register.filter
def subscription_for(subscriptions: Any, uri: Any) -> Any:
    """The open subscription to ``uri`` among a server's (``selectors.server_subscriptions``), or None."""
    return subscriptions.get(str(uri)) if isinstance(subscriptions, dict) else None
