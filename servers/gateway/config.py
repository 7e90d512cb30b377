"""What the gateway needs to know about a server: plain, hashable, Django-free."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field

from servers.gateway.oauth import OAuthSettings

ERAS: dict[str, str] = {
    "legacy": "legacy — initialize handshake (≤ 2025-11-25)",
    "auto": "auto — try server/discover, fall back to initialize",
    "modern": "2026-07-28 — stateless, no probe",
}
MODERN_VERSION = "2026-07-28"
# Shorter values are not treated as secrets: masking "a" everywhere would destroy the record.
MIN_SECRET_CHARS = 6

_REFERENCE_RE = re.compile(r"\$\{([A-Za-z_][A-Za-z0-9_]*)\}")


class ConfigError(ValueError):
    """The server's configuration cannot be used as it stands (e.g. a missing env reference)."""


@dataclass(frozen=True)
class ServerConfig:
    """How to reach one MCP server. Equal configs share one pooled session.

    ``secrets`` are the plain values of the server's secret env entries and headers (decrypted,
    or resolved from ``${VAR}`` references): the gateway masks them in everything it captures.
    ``roots`` are offered to servers that ask (``roots/list``); ``sampling`` and ``elicitation``
    say whether the client advertises those capabilities.
    """

    server_id: int
    name: str
    transport: str
    command: str = ""
    args: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    cwd: str = ""
    url: str = ""
    headers: tuple[tuple[str, str], ...] = ()
    era: str = "legacy"
    call_timeout: float = 30.0
    roots: tuple[tuple[str, str], ...] = ()
    sampling: bool = False
    elicitation: bool = False
    secrets: tuple[str, ...] = ()
    # Sent as logging/setLevel after the handshake of each new session; changing it does not
    # replace a live session (the change itself is sent on it).
    log_level: str = field(default="", compare=False)
    # HTTP only: authorize with OAuth (the SDK's flow, recorded) as this grant's owner.
    oauth: OAuthSettings | None = None
    # Whom the session is for: the conversation's owner for a turn, the signed-in user for a
    # workbench operation (None: an operation nobody owns, run by staff with ``manage.py
    # server``). A server keeps state per session (a stdio process's memory), so users never
    # share one (``pool.session_key``).
    user_id: int | None = None

    def client_mode(self) -> str:
        """The SDK ``Client(mode=...)`` value for this era."""
        return {"legacy": "legacy", "auto": "auto"}.get(self.era, MODERN_VERSION)

    def maskable_secrets(self) -> tuple[str, ...]:
        """The secret values worth masking, longest first (so a secret inside another goes second)."""
        values = (*self.secrets, *(self.oauth.secrets() if self.oauth is not None else ()))
        usable = {value for value in values if len(value) >= MIN_SECRET_CHARS}
        return tuple(sorted(usable, key=len, reverse=True))


def has_references(value: str) -> bool:
    return _REFERENCE_RE.search(value) is not None


def resolve_references(value: str) -> str:
    """Expand ``${VAR}`` from the process environment, so secrets need not be stored.

    Raises:
        ConfigError: a referenced variable is not set.
    """

    def expand(match: re.Match[str]) -> str:
        name = match.group(1)
        if name not in os.environ:
            raise ConfigError(f"environment variable {name} is referenced but not set on this worker")
        return os.environ[name]

    return _REFERENCE_RE.sub(expand, value)
