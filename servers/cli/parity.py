"""``server ping`` and ``server complete``: requests the official MCP Inspector's command line
sends, run and recorded here as every workbench operation is (an ``Operation`` with its exchanges,
shown on its page and in the server's transcript); and ``server import`` / ``server export`` of
a host's server configuration (``servers.mcp_config``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from servers import mcp_config, services
from servers.models import McpServer, Operation
from servers.vault import is_sealed

ACTIONS = frozenset({"ping", "complete", "import", "export"})


def add_parsers(sub: Any) -> None:
    """Add ``ping`` and ``complete`` to ``sub``, the command's sub-parsers."""
    ping = sub.add_parser("ping", help="send ping and print the round trip (a recorded operation)")
    ping.add_argument("name")
    ping.add_argument("--json", action="store_true")
    complete = sub.add_parser(
        "complete", help="completion/complete: suggestions for a prompt's argument or a template's variable"
    )
    complete.add_argument("name")
    reference = complete.add_mutually_exclusive_group(required=True)
    reference.add_argument("--prompt", default="", help="the prompt whose argument is completed")
    reference.add_argument("--template", default="", help="the resource template (its URI template)")
    complete.add_argument("argument", help="the argument (or template variable) to complete")
    complete.add_argument("value", help="what is typed so far")
    complete.add_argument(
        "--context",
        action="append",
        default=[],
        metavar="NAME=VALUE",
        help="an argument already given, as context for the server (repeatable)",
    )
    complete.add_argument("--json", action="store_true")
    load = sub.add_parser(
        "import",
        help="register every server of a host's configuration (Claude, Cursor, VS Code): all or none",
    )
    load.add_argument("file", help="the JSON file ('-' for standard input)")
    load.add_argument("--replace", action="store_true", help="update servers already registered by name")
    dump = sub.add_parser("export", help="the registry as a host's configuration, secrets as placeholders")
    dump.add_argument("names", nargs="*", metavar="NAME", help="these servers (default: every one)")
    dump.add_argument("--format", choices=mcp_config.FORMATS, default="mcpServers")


def run(command: BaseCommand, options: dict[str, Any]) -> None:
    """Run ``options["action"]`` (one of ``ACTIONS``) and print what it answered.

    Raises:
        CommandError: bad arguments or file, or the operation did not end ``ok`` (exit status 1).
    """
    action = options["action"]
    if action == "import":
        _import(command, options["file"], replace=options["replace"])
        return
    if action == "export":
        _export(command, options["names"], shape=options["format"])
        return
    server = _server(options["name"])
    if action == "ping":
        operation = _start(server, Operation.Kind.PING)
        shown = f"pong from {server.name} in {_result(operation).get('round_trip_ms', '?')} ms"
    else:
        operation = _start(server, Operation.Kind.COMPLETE, **completion(options))
        values = (_result(operation).get("completion") or {}).get("values") or []
        shown = "\n".join(str(value) for value in values) or "(no suggestions)"
    if options["json"]:
        command.stdout.write(json.dumps(_document(operation), indent=2))
    elif operation.status == Operation.Status.OK:
        command.stdout.write(shown)
    if operation.status != Operation.Status.OK:
        raise CommandError(f"{operation.kind} ended with status {operation.status}: {operation.error}")


def _import(command: BaseCommand, path: str, *, replace: bool) -> None:
    try:
        raw = sys.stdin.buffer.read(mcp_config.MAX_BYTES + 1) if path == "-" else _read(Path(path))
        saved = mcp_config.import_entries(mcp_config.parse(raw), actor=None, replace=replace, via="cli")
    except mcp_config.ConfigFileError as exc:
        raise CommandError(f"{path}: nothing imported: {exc}") from None
    for server, new in saved:
        sealed = sum(1 for value in (*server.env.values(), *server.headers.values()) if is_sealed(str(value)))
        note = f", {sealed} value(s) sealed" if sealed else ""
        command.stdout.write(
            f"{'added' if new else 'updated'} {server.name} ({server.get_transport_display()}{note})"
        )


def _read(path: Path) -> bytes:
    try:
        with path.open("rb") as handle:
            return handle.read(mcp_config.MAX_BYTES + 1)
    except OSError as exc:
        raise mcp_config.ConfigFileError(f"cannot read it: {exc.strerror or exc}") from None


def _export(command: BaseCommand, names: list[str], *, shape: str) -> None:
    servers = McpServer.objects.order_by("name")
    if names:
        servers = servers.filter(name__in=names)
        missing = sorted(set(names) - {server.name for server in servers})
        if missing:
            raise CommandError(f"no server named {', '.join(missing)} (see: manage.py server list)")
    command.stdout.write(json.dumps(mcp_config.export(servers, shape=shape), indent=2, ensure_ascii=False))


def _server(name: str) -> McpServer:
    try:
        return McpServer.objects.get(name=name)
    except McpServer.DoesNotExist:
        raise CommandError(f"no server named {name!r} (see: manage.py server list)") from None


def completion(options: dict[str, Any]) -> dict[str, Any]:
    """The operation's target and arguments for ``server complete``, as the page's form gives them."""
    context: dict[str, str] = {}
    for pair in options["context"]:
        name, separator, value = pair.partition("=")
        if not separator or not name:
            raise CommandError(f"--context takes NAME=VALUE, not {pair!r}")
        context[name] = value
    if options["prompt"]:
        ref = {"type": "ref/prompt", "name": options["prompt"]}
    else:
        ref = {"type": "ref/resource", "uri": options["template"]}
    return {
        "target": options["prompt"] or options["template"],
        "arguments": {
            "ref": ref,
            "argument": {"name": options["argument"], "value": options["value"]},
            "context": context,
        },
    }


def _start(server: McpServer, kind: str, *, target: str = "", arguments: Any = None) -> Operation:
    return services.operation_start(
        server=server, user=None, kind=kind, target=target, arguments=arguments, source=Operation.Source.CLI
    )


def _result(operation: Operation) -> dict[str, Any]:
    return operation.result if isinstance(operation.result, dict) else {}


def _document(operation: Operation) -> dict[str, Any]:
    return {
        "server": operation.server.name,
        "kind": operation.kind,
        "target": operation.target,
        "operation": str(operation.public_id),
        "status": operation.status,
        "error": operation.error,
        "result": operation.result,
    }
