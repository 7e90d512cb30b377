"""``server ping`` and ``server complete``: requests the official MCP Inspector's command line
sends, run and recorded here as every workbench operation is (an ``Operation`` with its exchanges,
shown on its page and in the server's transcript)."""

from __future__ import annotations

import json
from typing import Any

from django.core.management.base import BaseCommand, CommandError

from servers import services
from servers.models import McpServer, Operation

ACTIONS = frozenset({"ping", "complete"})


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


def run(command: BaseCommand, server: McpServer, options: dict[str, Any]) -> None:
    """Run ``options["action"]`` (one of ``ACTIONS``) on ``server`` and print what it answered.

    Raises:
        CommandError: bad arguments, or the operation did not end ``ok`` (exit status 1).
    """
    if options["action"] == "ping":
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
