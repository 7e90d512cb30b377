"""What the proxies read off a host's request before they forward it: its header lines as it sent
them, the credentials among them (to mask wherever the traffic repeats them) and the session an
``X-Inspector-Session`` value names. Shared by the LLM proxy (``conversations.proxy.llm``) and the
MCP HTTP proxy (``servers.proxy.http``); docs/proxy-llm.md and docs/proxy-mcp.md describe the
header and the masking."""

from __future__ import annotations

from collections.abc import Iterable
from urllib.parse import unquote_plus

from django.http import HttpRequest

SESSION_HEADER = "X-Inspector-Session"
# Request headers whose values are the host's credentials (beside ``?key=`` in Gemini's URL).
CREDENTIAL_HEADERS = ("authorization", "x-api-key", "x-goog-api-key", "api-key")


def credentials(headers: Iterable[tuple[str, str]], query: str) -> tuple[str, ...]:
    """Every credential the host sent: each value of each credential header (a header sent twice
    is two credentials), whole and as its bare token, and ``?key=`` both as sent and decoded (an
    upstream may repeat either form)."""
    found: list[str] = []
    for name, value in headers:
        if name.lower() not in CREDENTIAL_HEADERS or not value:
            continue
        found.append(value)
        scheme, _, token = value.partition(" ")
        if token and scheme.lower() in {"bearer", "basic", "token"}:
            found.append(token.strip())
    for part in query.split("&"):
        name, _, value = part.partition("=")
        if unquote_plus(name) == "key" and value:
            found.extend((value, unquote_plus(value)))
    return tuple(dict.fromkeys(value for value in found if value))


def header_lines(request: HttpRequest) -> list[tuple[str, str]]:
    """The host's header lines as it sent them, each byte one Latin-1 character, a repeated header
    as each of its lines: from the ASGI scope the request was made from (Django's
    ``request.headers`` joins a repeated header's values with commas, which no reader can split
    back: a value may hold commas), else (WSGI, the test client) Django's headers."""
    scope = getattr(request, "scope", None)
    if isinstance(scope, dict) and "headers" in scope:
        return [(name.decode("latin-1"), value.decode("latin-1")) for name, value in scope["headers"]]
    return list(request.headers.items())


def session_name(value: str) -> str | None:
    """The session an ``X-Inspector-Session`` value names (None: none). Servers hand a header's
    bytes over as Latin-1 text (one character a byte); a host that sends a name outside ASCII
    sends its UTF-8, as ``proxy stdio --session`` reads its argument, so the bytes are read as
    UTF-8 when they are UTF-8 (the same name is then one session on every route) and kept as the
    Latin-1 text when not."""
    if not value:
        return None
    try:
        return value.encode("latin-1").decode("utf-8")
    except (UnicodeEncodeError, UnicodeDecodeError):
        return value
