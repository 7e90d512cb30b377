"""``server hosts NAME [--host H ...] [--json]`` and ``server check NAME [--host H ...] [--strict] [--json]``.

Both list the server's tools first (a recorded ``tools/list``, as ``server tools`` does), then
show them as each host preset would send them (docs/hosts.md). ``check`` exits with the
readiness code: 0 ready, 1 warnings (with ``--strict`` only), 2 refused by some host or broken,
3 the tools could not be listed.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from django.core.management.base import CommandError, OutputWrapper

from conversations.loop.hosts import HOSTS, HostView
from servers import services
from servers.hosts.check import server_check
from servers.hosts.reports import UnknownHost, host_views, hosts_document, hosts_named, listed_tools
from servers.models import McpServer, Operation

ACTIONS = ("hosts", "check")
EXIT_NOT_LISTED = 3
_SHOWN_VALUE = 60


def add_parsers(sub: Any) -> None:
    """Register ``hosts`` and ``check`` on the ``server`` command's subparsers."""
    hosts = sub.add_parser(
        "hosts", help="each tool as each host would send it to its model, and a verdict per host"
    )
    check = sub.add_parser(
        "check",
        help="a readiness report for CI: host portability, descriptions, names, schemas, annotations",
        description="Exit codes: 0 ready, 1 warnings (only with --strict), 2 refused by some host or "
        "broken for every client, 3 the tools could not be listed.",
    )
    for parser in (hosts, check):
        parser.add_argument("name")
        parser.add_argument(
            "--host",
            action="append",
            default=[],
            choices=list(HOSTS),
            help="a host preset (repeat; default: all)",
        )
        parser.add_argument("--json", action="store_true")
    check.add_argument("--strict", action="store_true", help="warnings fail too (exit 1)")


def run(action: str, server: McpServer, options: Mapping[str, Any], out: OutputWrapper) -> None:
    """Run ``hosts`` or ``check`` for ``server``.

    Raises:
        CommandError: the tools could not be listed (exit 3), a host name is unknown, or (``check``)
            the server is not ready: its ``returncode`` is the readiness code.
    """
    try:
        presets = hosts_named(options.get("host") or [])
    except UnknownHost as exc:
        raise CommandError(str(exc)) from None
    operation, tools = _listed(server)
    if action == "hosts":
        if options.get("json"):
            document = hosts_document(
                server=server, tools=tools, presets=presets, operation=str(operation.public_id)
            )
            out.write(json.dumps(document, indent=2, ensure_ascii=False))
        else:
            _print_hosts(out, host_views(server.name, tools, presets), len(tools))
        return
    strict = bool(options.get("strict"))
    readiness = server_check(server.name, tools, presets)
    code = readiness.exit_code(strict=strict)
    if options.get("json"):
        document = readiness.as_json(strict=strict)
        document["operation"] = str(operation.public_id)
        out.write(json.dumps(document, indent=2, ensure_ascii=False))
    else:
        for finding in readiness.findings:
            where = f"[{finding.host}] " if finding.host else ""
            out.write(f"{finding.level:<7} {finding.area:<12} {finding.tool}: {where}{finding.message}")
        verdicts = ", ".join(f"{key} {verdict}" for key, verdict in readiness.hosts.items())
        out.write(
            f"{server.name}: {readiness.count('error')} errors, {readiness.count('warning')} warnings, "
            f"{readiness.count('note')} notes; hosts: {verdicts}"
        )
    if code:
        why = {2: "refused by some host, or broken for every client", 1: "warnings, and --strict"}[code]
        raise CommandError(f"{server.name} is not ready: {why} (exit {code})", returncode=code)


def _listed(server: McpServer) -> tuple[Operation, Sequence[Mapping[str, Any]]]:
    operation = services.operation_start(
        server=server, user=None, kind=Operation.Kind.TOOLS_LIST, source=Operation.Source.CLI
    )
    if operation.status != Operation.Status.OK:
        raise CommandError(f"tools/list failed: {operation.error}", returncode=EXIT_NOT_LISTED)
    return operation, listed_tools(server=server, user=None).tools


def _shown(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= _SHOWN_VALUE else text[: _SHOWN_VALUE - 1] + "…"


def _print_hosts(out: OutputWrapper, views: Sequence[HostView], count: int) -> None:
    if not count:
        out.write("no tools")
    for view in views:
        counts = {
            verdict: sum(1 for tool in view.tools if tool.verdict == verdict)
            for verdict in ("ok", "changed", "refused")
        }
        out.write(
            f"{view.preset.key} ({view.preset.label}): {view.verdict} — "
            f"{counts['ok']} ok, {counts['changed']} changed, {counts['refused']} refused"
        )
        for tool in view.tools:
            renamed = f" as {tool.host_name}" if tool.host_name != tool.name else ""
            out.write(f"  {tool.name}{renamed}: {tool.verdict}")
            for refusal in tool.refusals:
                out.write(
                    f"      refused  {refusal.problem} — {refusal.rule.text} [{refusal.rule.status}: {refusal.rule.source}]"
                )
            for change in tool.changes:
                if change.kind == "changed":
                    out.write(
                        f"      changed  {change.path}: {_shown(change.before)} -> {_shown(change.after)}"
                    )
                elif change.kind == "added":
                    out.write(f"      added    {change.path}: {_shown(change.after)}")
                else:
                    out.write(f"      LOST     {change.path}: {_shown(change.before)}")
            if tool.changes_left_out:
                out.write(
                    f"      … and {tool.changes_left_out} more differences (--json has the first ones too)"
                )


__all__ = ["ACTIONS", "add_parsers", "run"]
