"""The raw-exchange record shared by the LLM client capture and the MCP transport tap.

Kept free of Django so the agent loop and the gateway can produce it; the recorder turns it
into an ``Exchange`` row.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from datetime import datetime

# Header names whose values are credentials: never stored, shown only as a mask.
SECRET_HEADER_RE = re.compile(r"(authorization|api[-_]?key|cookie|token|secret|password)", re.IGNORECASE)
MASK = "••••••"
# The key under which a tools/call request's ``params._meta`` carries the id of the model's call it
# runs: the loop sends it, a host may, and the recording proxy links by it (docs/proxy.md §3).
CALL_ID_META_KEY = "tool-call-inspector/call_id"
# The MCP transports by name, in the order they are offered: a transcript names its servers'
# transports by these. ``servers.gateway.transports.TRANSPORTS`` holds one class for each (a test
# holds the two equal).
TRANSPORT_NAMES = ("stdio", "http", "sse")


@dataclass
class WireExchange:
    """One request/response pair on the wire, or one unpaired message.

    ``request_body`` and ``response_body`` hold the exact text; an unpaired server message
    (a notification, stderr output) has only a ``response_body``.
    """

    channel: str
    label: str
    started_at: datetime
    direction: str = "client"
    jsonrpc_id: str = ""
    request_headers: dict[str, str] = field(default_factory=dict)
    request_body: str = ""
    response_headers: dict[str, str] = field(default_factory=dict)
    response_body: str = ""
    status: str = ""
    error: str = ""
    duration_ms: float | None = None
    server_id: int | None = None
    # The server's name as it was when the record was captured (kept if the server row goes).
    server_name: str = ""
    # What full-text search indexes in place of ``response_body`` (None: the body itself). A
    # streamed reply's body is its events, which cut words wherever the model's pieces end, so
    # the reply as it assembled is searched instead (``providers.ModelReply``).
    search_text: str | None = None


def safe_headers(headers: Iterable[tuple[str, str]] | Mapping[str, str]) -> dict[str, str]:
    """Headers fit to store: every credential-bearing value replaced by a mask."""
    items = headers.items() if isinstance(headers, Mapping) else headers
    return {name.lower(): (MASK if SECRET_HEADER_RE.search(name) else value) for name, value in items}


def decode_body(data: bytes) -> str:
    """Bytes as text with every byte kept, as the gateway keeps a server's stray lines: a byte
    that is not UTF-8 becomes a lone surrogate (``surrogateescape``: byte XX is ``\\udcXX``),
    which the recorder stores escaped (``conversations.escaping``). The original bytes are
    ``decode_body(data).encode("utf-8", errors="surrogateescape")``."""
    return data.decode("utf-8", errors="surrogateescape")
