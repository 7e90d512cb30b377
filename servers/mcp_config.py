"""Hosts' MCP server configurations, read and written: the ``mcpServers`` JSON of Claude Desktop,
Claude Code (``.mcp.json``) and Cursor (``mcp.json``), and VS Code's ``servers`` (``.vscode/mcp.json``).

``server import FILE`` (and the servers page) registers every entry of such a file at once, or
none: each entry is checked first, and one wrong entry refuses the file with the entry's name
and the reason. Every env and header value is sealed on import (a host keeps API keys there)
unless it is a ``${VAR}`` reference, resolved from the worker's environment at connect time.
``server export`` writes the registry back in either shape with every sealed value replaced by
a placeholder the host fills in (``${NAME}``; in VS Code's shape an ``${input:...}`` prompt), so
an export never holds a secret. docs/mcp-client.md ("Host configurations") gives the sources.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from django.contrib.auth.base_user import AbstractBaseUser
from django.core.exceptions import ValidationError
from django.db import transaction

from servers import services
from servers.models import McpServer, server_name_validator
from servers.vault import is_sealed

# A configuration file is a few kilobytes; anything near this is not one.
MAX_BYTES = 1_000_000
MAX_ENTRIES = 200
FORMATS = ("mcpServers", "vscode")
# What hosts write in ``type`` for each transport this registry knows.
_TRANSPORTS = {
    "stdio": "stdio",
    "http": "http",
    "streamable-http": "http",
    "streamableHttp": "http",
    "sse": "sse",
}
_PLACEHOLDER_NAME = re.compile(r"[^A-Za-z0-9_]")


class ConfigFileError(ValueError):
    """The file is not a host configuration this can import; the message says where and why."""


@dataclass(frozen=True)
class Entry:
    """One server of a host configuration, as the registry would store it."""

    name: str
    transport: str
    command: str = ""
    args: list[str] = field(default_factory=list)
    cwd: str = ""
    url: str = ""
    env: dict[str, str] = field(default_factory=dict)
    headers: dict[str, str] = field(default_factory=dict)

    @property
    def fields(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "transport": self.transport,
            "command": self.command,
            "args": self.args,
            "cwd": self.cwd,
            "url": self.url,
        }


def parse(raw: bytes | str) -> list[Entry]:
    """The entries of a host configuration file (either shape).

    Raises:
        ConfigFileError: not JSON, too big, not either shape, or an entry that cannot be
            registered (its name and the reason are in the message).
    """
    if len(raw) > MAX_BYTES:
        raise ConfigFileError(
            f"the file is {len(raw):,} bytes; a host configuration is at most {MAX_BYTES:,}"
        )
    try:
        document = json.loads(raw)
    except (ValueError, RecursionError) as exc:
        raise ConfigFileError(f"the file is not JSON: {exc}") from None
    if not isinstance(document, dict):
        raise ConfigFileError("the file is not a JSON object with 'mcpServers' (or VS Code's 'servers')")
    servers = document.get("mcpServers", document.get("servers"))
    if not isinstance(servers, dict):
        raise ConfigFileError("the file has no 'mcpServers' object (nor VS Code's 'servers')")
    if len(servers) > MAX_ENTRIES:
        raise ConfigFileError(
            f"the file names {len(servers)} servers; at most {MAX_ENTRIES} are imported at once"
        )
    return [_entry(str(name), value) for name, value in servers.items()]


def _entry(name: str, value: Any) -> Entry:
    def refuse(reason: str) -> ConfigFileError:
        return ConfigFileError(f"server {name!r}: {reason}")

    try:
        server_name_validator(name)
    except ValidationError:
        raise refuse("use 1-40 letters, digits, '_' or '-' as its name (it prefixes tool names)") from None
    if not isinstance(value, dict):
        raise refuse("is not a JSON object")
    kind = value.get("type")
    if kind is not None and kind not in _TRANSPORTS:
        raise refuse(f"type {kind!r} is none of {', '.join(sorted(_TRANSPORTS))}")
    command, url = value.get("command"), value.get("url")
    if bool(command) == bool(url):
        raise refuse("needs either 'command' (stdio) or 'url' (HTTP), not both or neither")
    env = _strings(value.get("env", {}), refuse, "env")
    headers = _strings(value.get("headers", {}), refuse, "headers")
    if command:
        args = value.get("args", [])
        if (
            not isinstance(command, str)
            or not isinstance(args, list)
            or not all(isinstance(a, str) for a in args)
        ):
            raise refuse("'command' must be a string and 'args' a list of strings")
        cwd = value.get("cwd", "")
        if not isinstance(cwd, str):
            raise refuse("'cwd' must be a string")
        return Entry(name=name, transport="stdio", command=command, args=list(args), cwd=cwd, env=env)
    if not isinstance(url, str):
        raise refuse("'url' must be a string")
    transport = _TRANSPORTS.get(str(kind or "http"), "http")
    if transport == "stdio":
        raise refuse("type 'stdio' needs 'command', not 'url'")
    return Entry(name=name, transport=transport, url=url, headers=headers)


def _strings(value: Any, refuse: Any, what: str) -> dict[str, str]:
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise refuse(f"'{what}' must be an object of strings")
    return {name: _HOST_VARIABLE.sub(_as_reference, text) for name, text in value.items()}


# VS Code's ``${env:NAME}`` and ``${input:ID}`` (Claude Code's ``${NAME}`` is already one): each
# becomes a ``${NAME}`` reference, read from the worker's environment when the server connects
# (an input's id upper-cased, other characters as "_": set that variable).
_HOST_VARIABLE = re.compile(r"\$\{(?:env|input):([^}]+)\}")


def _as_reference(match: re.Match[str]) -> str:
    return "${" + _PLACEHOLDER_NAME.sub("_", match.group(1)).upper() + "}"


def import_entries(
    entries: Iterable[Entry], *, actor: AbstractBaseUser | None, replace: bool, via: str
) -> list[tuple[McpServer, bool]]:
    """Register ``entries`` in one transaction: every one, or none. Each env and header value is
    stored sealed unless it is a ``${VAR}`` reference. Returns each server and whether it was
    new.

    Raises:
        ConfigFileError: a name is taken and ``replace`` is off, or an entry is not a valid
            server (nothing is saved).
    """
    entries = list(entries)
    existing = {
        server.name: server for server in McpServer.objects.filter(name__in=[e.name for e in entries])
    }
    taken = sorted(name for name in existing if not replace)
    if taken:
        raise ConfigFileError(
            f"already registered: {', '.join(taken)} (import with --replace to update them, or rename them)"
        )
    saved: list[tuple[McpServer, bool]] = []
    with transaction.atomic():
        for entry in entries:
            try:
                server = services.server_save(
                    server=existing.get(entry.name),
                    owner=actor,
                    fields=entry.fields,
                    env={},
                    secret_env=entry.env,
                    headers={},
                    secret_headers=entry.headers,
                    via=via,
                )
            except ValidationError as exc:
                raise ConfigFileError(f"server {entry.name!r}: {'; '.join(exc.messages)}") from None
            saved.append((server, entry.name not in existing))
    return saved


def export(servers: Iterable[McpServer], *, shape: str = "mcpServers") -> dict[str, Any]:
    """``servers`` as a host configuration (``shape``: one of ``FORMATS``), no secret in it: a
    sealed env or header value becomes a placeholder the host fills in."""
    inputs: list[dict[str, Any]] = []
    entries: dict[str, Any] = {}
    for server in servers:

        def shown(name: str, value: Any, server: McpServer = server) -> str:
            text = str(value)
            if not is_sealed(text):
                return text
            key = _PLACEHOLDER_NAME.sub("_", f"{server.name}_{name}").upper()
            if shape == "vscode":
                inputs.append(
                    {
                        "type": "promptString",
                        "id": key,
                        "description": f"{server.name}: {name}",
                        "password": True,
                    }
                )
                return f"${{input:{key}}}"
            return f"${{{key}}}"

        entry: dict[str, Any] = {}
        if server.spawns_process:
            if shape == "vscode":
                entry["type"] = "stdio"
            entry["command"] = server.command
            entry["args"] = list(server.args)
            if server.cwd:
                entry["cwd"] = server.cwd
            if server.env:
                entry["env"] = {k: shown(k, v) for k, v in _items(server.env)}
        else:
            entry["type"] = "sse" if server.transport == "sse" else "http"
            entry["url"] = server.url
            if server.headers:
                entry["headers"] = {k: shown(k, v) for k, v in _items(server.headers)}
        entries[server.name] = entry
    if shape == "vscode":
        return {"inputs": inputs, "servers": entries} if inputs else {"servers": entries}
    return {"mcpServers": entries}


def _items(values: Any) -> list[tuple[str, Any]]:
    return list(values.items()) if isinstance(values, Mapping) else []
