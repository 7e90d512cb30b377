"""MCP Apps (the ``io.modelcontextprotocol/ui`` extension): what a tool's UI is and how it is served.

Pure functions over JSON (no Django): which ``ui://`` resource a tool names, the HTML a
``resources/read`` of it returned, the Content-Security-Policy that HTML is served under (built
from the resource's ``_meta.ui.csp``, default: no network at all), and how one postMessage
message between an app and the host page is labelled and bounded in the transcript.
Facts: docs/mcp-apps.md.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from dataclasses import dataclass, field
from typing import Any

from conversations.typealias import JSONDict

# The extension's identifier, advertised by the gateway under ``capabilities.extensions``.
UI_EXTENSION = "io.modelcontextprotocol/ui"
APP_MIME = "text/html;profile=mcp-app"
# What the gateway tells servers it can render.
CLIENT_SETTINGS: JSONDict = {"mimeTypes": [APP_MIME]}
# One message kept in the transcript at most this long (the rest is cut, and the cut said).
MESSAGE_CHARS = 64_000
# At most this many messages per POST, and per tool call's app in all.
BATCH_MESSAGES = 100
MESSAGES_PER_OPERATION = 2_000
# The two sides of the conversation between an app and the host page.
SIDES = {"app": "app → host", "host": "host → app"}
APP_LABEL_RE = "^(app → host|host → app) "
# A CSP source an app may name: a scheme, a host (optionally ``*.``-prefixed) and a port.
# Anything else (keywords, paths with ``;``, quotes, spaces) could change the policy's meaning.
_SOURCE_RE = re.compile(r"^(https|wss|http|ws)://(\*\.)?[A-Za-z0-9-]+(\.[A-Za-z0-9-]+)*(:[0-9]{1,5})?/?$")
_CSP_KEYS = {
    "connectDomains": ("connect-src",),
    "resourceDomains": ("script-src", "style-src", "img-src", "font-src", "media-src"),
    "frameDomains": ("frame-src",),
    "baseUriDomains": ("base-uri",),
}


class AppResourceError(ValueError):
    """The resource read did not give an HTML app (says what it gave instead)."""


@dataclass(frozen=True)
class AppResource:
    """An app's HTML and what its ``_meta.ui`` asked for."""

    uri: str
    html: str
    csp: dict[str, list[str]] = field(default_factory=dict)
    refused: list[str] = field(default_factory=list)
    permissions: list[str] = field(default_factory=list)


def ui_resource_uri(tool: JSONDict | None) -> str:
    """The ``ui://`` resource a tool definition names (``_meta.ui.resourceUri``, or the earlier
    flat key ``_meta["ui/resourceUri"]``), or ``""`` for a tool without a UI."""
    meta = (tool or {}).get("_meta")
    if not isinstance(meta, dict):
        return ""
    ui = meta.get("ui")
    uri = ui.get("resourceUri") if isinstance(ui, dict) else None
    if not isinstance(uri, str):
        uri = meta.get("ui/resourceUri")
    return uri if isinstance(uri, str) and uri.startswith("ui://") else ""


def model_visible(tool: JSONDict | None) -> bool:
    """Whether the model may be shown the tool: not when its ``_meta.ui.visibility`` is a list
    without ``"model"`` (a tool for its app only, which the app calls through the host). Absent or
    unreadable, a tool is visible, as the extension's default says."""
    meta = (tool or {}).get("_meta")
    ui = meta.get("ui") if isinstance(meta, dict) else None
    visibility = ui.get("visibility") if isinstance(ui, dict) else None
    return not isinstance(visibility, list) or "model" in visibility


def turn_tool(tools: Any, *, server_id: int | None, name: str) -> JSONDict | None:
    """The definition of ``name`` on that server among the tools a turn was given, if any."""
    for tool in tools if isinstance(tools, list) else []:
        if isinstance(tool, dict) and tool.get("server_id") == server_id and tool.get("name") == name:
            return tool
    return None


def _ui_meta(content: JSONDict) -> JSONDict:
    meta = content.get("_meta")
    ui = meta.get("ui") if isinstance(meta, dict) else None
    return ui if isinstance(ui, dict) else {}


def _sources(value: Any) -> tuple[list[str], list[str]]:
    accepted: list[str] = []
    refused: list[str] = []
    for item in value if isinstance(value, list) else []:
        text = str(item)[:300]
        (accepted if _SOURCE_RE.match(text) else refused).append(text.rstrip("/"))
    return accepted, refused


def app_resource(result: Any, *, uri: str) -> AppResource:
    """The app in a ``resources/read`` result: the first HTML content of ``uri`` (text, or a
    base64 blob), with the domains its ``_meta.ui.csp`` names (those that are not plain
    scheme://host[:port] sources are refused, and listed) and the permissions it asks for.

    Raises:
        AppResourceError: no HTML content came back.
    """
    contents = result.get("contents") if isinstance(result, dict) else None
    for content in contents if isinstance(contents, list) else []:
        if not isinstance(content, dict) or not str(content.get("mimeType", "")).startswith("text/html"):
            continue
        if isinstance(content.get("text"), str):
            html = content["text"]
        else:
            try:
                html = base64.b64decode(str(content.get("blob", "")), validate=True).decode(
                    "utf-8", "replace"
                )
            except (binascii.Error, ValueError):
                raise AppResourceError("the app's HTML blob is not valid base64") from None
        ui = _ui_meta(content)
        declared = ui.get("csp")
        csp_meta: JSONDict = declared if isinstance(declared, dict) else {}
        csp: dict[str, list[str]] = {}
        refused: list[str] = []
        for key in _CSP_KEYS:
            accepted, bad = _sources(csp_meta.get(key))
            if accepted:
                csp[key] = accepted
            refused.extend(bad)
        permissions = ui.get("permissions")
        return AppResource(
            uri=str(content.get("uri") or uri),
            html=html,
            csp=csp,
            refused=refused,
            permissions=sorted(str(p)[:40] for p in permissions) if isinstance(permissions, dict) else [],
        )
    mimes = [str(c.get("mimeType", "?")) for c in contents or [] if isinstance(c, dict)]
    raise AppResourceError(
        f"{uri} gave no HTML content (mimeTypes: {', '.join(mimes) or 'none'}); an app is {APP_MIME}"
    )


def csp_header(csp: dict[str, list[str]]) -> str:
    """The policy an app's HTML is served under: its own inline script and style, data: images,
    and only the domains its metadata declared; no network otherwise, no forms, no plugins, and
    sandboxed to an opaque origin even if the page is opened on its own."""
    directives: dict[str, list[str]] = {
        "default-src": ["'none'"],
        "script-src": ["'unsafe-inline'"],
        "style-src": ["'unsafe-inline'"],
        "img-src": ["data:", "blob:"],
        "font-src": ["data:"],
        "media-src": ["data:", "blob:"],
        "connect-src": [],
        "frame-src": [],
        "base-uri": [],
        "form-action": ["'none'"],
        "object-src": ["'none'"],
        "frame-ancestors": ["'self'"],
    }
    for key, names in _CSP_KEYS.items():
        for name in names:
            directives[name].extend(csp.get(key, []))
    parts = [
        f"{name} {' '.join(sources) or chr(39) + 'none' + chr(39)}" for name, sources in directives.items()
    ]
    return "; ".join([*parts, "sandbox allow-scripts"])


def is_app_label(label: str) -> bool:
    """Whether a transcript row is a message between an app and the host page."""
    return label.startswith(tuple(SIDES.values()))


def _bounded(text: str) -> str:
    if len(text) <= MESSAGE_CHARS:
        return text
    return text[:MESSAGE_CHARS] + f"\n… cut: {len(text) - MESSAGE_CHARS} more characters not kept"


@dataclass(frozen=True)
class AppMessage:
    """One postMessage message as the transcript keeps it."""

    side: str
    label: str
    text: str
    jsonrpc_id: str
    is_error: bool


def app_message(item: Any) -> AppMessage | None:
    """One message the host page reported, or None when it is not ``{"side", "message"}`` (and
    optionally ``"method"``) with a known side. The message text is kept as given (cut to ``MESSAGE_CHARS``); the label names
    its method, or says it is a response or not JSON-RPC at all."""
    if (
        not isinstance(item, dict)
        or item.get("side") not in SIDES
        or not isinstance(item.get("message"), str)
    ):
        return None
    text = _bounded(item["message"])
    try:
        body = json.loads(text)
    except (ValueError, RecursionError):
        body = None
    # The page names the method of a message it could not pass on whole (cut, or not writable
    # as JSON): the text alone no longer says it.
    hint = item.get("method")
    what = f"{hint[:120]} (not kept whole)" if isinstance(hint, str) and hint else "not JSON-RPC"
    jsonrpc_id = ""
    is_error = False
    if isinstance(body, dict) and body.get("jsonrpc") == "2.0":
        method = body.get("method")
        if isinstance(method, str):
            what = method[:120]
        elif "error" in body:
            what, is_error = "error", True
        elif "result" in body:
            what = "result"
        if isinstance(body.get("id"), (str, int)) and not isinstance(body.get("id"), bool):
            jsonrpc_id = str(body["id"])[:64]
    label = f"{SIDES[item['side']]} {what}"
    return AppMessage(
        side=item["side"], label=label[:200], text=text, jsonrpc_id=jsonrpc_id, is_error=is_error
    )


@dataclass(frozen=True)
class RecordedCall:
    """A ``tools/call`` an app made through the host, and the answer the host gave it, as the
    transcript kept them (redacted, possibly cut: what was recorded, not what a new call would give)."""

    name: str
    arguments: Any
    result: Any = None
    error: str = ""

    def as_json(self) -> JSONDict:
        return {"name": self.name, "arguments": self.arguments, "result": self.result, "error": self.error}


def _parsed(text: str) -> Any:
    try:
        return json.loads(text)
    except (ValueError, RecursionError):
        return None


def recorded_calls(rows: list[tuple[str, str, str, str]]) -> list[RecordedCall]:
    """The app's tool calls and their answers, from its recorded messages in recording order:
    ``(label, jsonrpc_id, request_body, response_body)``. Each ``app → host tools/call`` is paired
    with the first host answer (result or error) with its id that follows it; a call the host
    never answered is left out."""
    waiting: dict[str, tuple[str, Any]] = {}
    calls: list[RecordedCall] = []
    for label, jsonrpc_id, request_body, response_body in rows:
        if label == f"{SIDES['app']} tools/call" and jsonrpc_id:
            params = (_parsed(request_body) or {}).get("params")
            if isinstance(params, dict) and isinstance(params.get("name"), str):
                waiting[jsonrpc_id] = (params["name"], params.get("arguments") or {})
        elif label in (f"{SIDES['host']} result", f"{SIDES['host']} error") and jsonrpc_id in waiting:
            name, arguments = waiting.pop(jsonrpc_id)
            answer = _parsed(response_body)
            if not isinstance(answer, dict):
                calls.append(RecordedCall(name, arguments, error="the recorded answer is not kept whole"))
            elif "error" in answer:
                error = answer["error"] if isinstance(answer["error"], dict) else {}
                calls.append(RecordedCall(name, arguments, error=str(error.get("message", ""))[:500]))
            else:
                calls.append(RecordedCall(name, arguments, result=answer.get("result")))
    return calls
