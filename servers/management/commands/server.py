"""``manage.py server``: the workbench from a terminal, recorded exactly as the browser records it.

server add NAME -- COMMAND [ARGS...]       a stdio server
server add NAME --url URL [--sse]          a streamable HTTP (or legacy HTTP+SSE) server
server list
server tools NAME [--json]
server call NAME TOOL --args JSON [--json] [--send-anyway] [--elicitation accept-defaults|decline|cancel]
server resources NAME [--json]             its resources and resource templates
server read NAME URI [--json]              read one (fill a template's variables yourself)
server prompts NAME [--json]
server prompt NAME PROMPT --args JSON [--json]
server log-level NAME LEVEL                logging/setLevel now, and on each later session
server ping NAME [--json]                  ping, and the round trip
server complete NAME (--prompt P | --template URI) ARG VALUE [--context NAME=VALUE ...] [--json]
                                           completion/complete: suggestions for ARG
server import FILE [--replace]             a host's mcpServers (or VS Code servers) JSON: all or none
server export [NAME ...] [--format mcpServers|vscode]
                                           the registry as a host's JSON, secrets as placeholders
server subscribe NAME URI --for SECONDS    resources/subscribe, print each update, then unsubscribe
server hosts NAME [--host H ...] [--json]  each tool as each host would send it (servers/cli/hosts.py)
server check NAME [--host H ...] [--strict] [--json]   readiness for CI: exit 0, 1 (--strict), 2, 3
server auth NAME [--client-id ID --client-secret SECRET | --client-metadata-url URL |
                  --grant client_credentials (--client-secret S | --private-key-file PEM --signing-alg ALG) |
                  --idp-client-id ID --idp-id-token JWT --idp-issuer URL --idp-token-endpoint URL]
                                           OAuth: run the flow now and keep the token (sealed)
"""

from __future__ import annotations

import asyncio
import json
import sys
import time
from pathlib import Path
from typing import Any

from django.core.management.base import CommandError, CommandParser

from servers import gateway, selectors, services
from servers.cli import hosts as host_commands
from servers.cli import parity
from servers.commandline import StdioCommandLine
from servers.forms import schema_errors
from servers.gateway.config import ERAS
from servers.gateway.oauth import GRANTS, AuthorizationRequired
from servers.grants import grant_configure
from servers.models import LOG_LEVELS, McpServer, Operation
from servers.operations import ELICITATION_PRESETS, elicitation_preset_answer
from servers.selectors import operation_updates

# How often `server subscribe` looks for updates the subscription has recorded.
SUBSCRIBE_POLL_SECONDS = 0.2
MAX_URI = 500  # an operation's target


class Command(StdioCommandLine):
    help = "Register MCP servers, list their tools and call them; every exchange is recorded."

    def add_arguments(self, parser: CommandParser) -> None:
        sub = parser.add_subparsers(dest="action", required=True)
        parity.add_parsers(sub)
        host_commands.add_parsers(sub)  # hosts, check (servers/cli/hosts.py)
        add = sub.add_parser("add", help="register a server: NAME -- COMMAND [ARGS...] or NAME --url URL")
        add.add_argument("name")
        add.add_argument("--url", default="")
        add.add_argument("--sse", action="store_true", help="the URL speaks the legacy HTTP+SSE transport")
        add.add_argument("--era", choices=list(ERAS), default="legacy")
        add.add_argument("--env", action="append", default=[], metavar="NAME=VALUE")
        add.add_argument("--secret-env", action="append", default=[], metavar="NAME=VALUE")
        add.add_argument("--header", action="append", default=[], metavar="NAME:VALUE")
        add.add_argument("--secret-header", action="append", default=[], metavar="NAME:VALUE")
        add.add_argument("--cwd", default="")
        add.add_argument("--timeout", type=float, default=30.0)
        add.add_argument("command", nargs="*", help="-- COMMAND [ARGS...] for a stdio server")
        sub.add_parser("list", help="the registered servers")
        tools = sub.add_parser("tools", help="list a server's tools (a recorded tools/list)")
        tools.add_argument("name")
        tools.add_argument("--json", action="store_true")
        call = sub.add_parser("call", help="call a tool (a recorded tools/call)")
        call.add_argument("name")
        call.add_argument("tool")
        call.add_argument("--args", dest="arguments", default="{}", help="the arguments as a JSON object")
        call.add_argument("--json", action="store_true")
        call.add_argument(
            "--send-anyway",
            action="store_true",
            help="send arguments that break the tool's inputSchema as they are (to test the server's "
            "own validation); the call is recorded as deliberately invalid",
        )
        call.add_argument(
            "--elicitation",
            choices=ELICITATION_PRESETS,
            default="",
            help="offer elicitation and answer the server's questions so: accept with the requested "
            "defaults, decline or cancel (without it the CLI does not offer elicitation)",
        )
        resources = sub.add_parser("resources", help="list resources and templates (recorded list calls)")
        resources.add_argument("name")
        resources.add_argument("--json", action="store_true")
        read = sub.add_parser("read", help="read a resource (a recorded resources/read)")
        read.add_argument("name")
        read.add_argument("uri")
        read.add_argument("--json", action="store_true")
        prompts = sub.add_parser("prompts", help="list a server's prompts (a recorded prompts/list)")
        prompts.add_argument("name")
        prompts.add_argument("--json", action="store_true")
        prompt = sub.add_parser("prompt", help="get a prompt (a recorded prompts/get)")
        prompt.add_argument("name")
        prompt.add_argument("prompt")
        prompt.add_argument(
            "--args", dest="arguments", default="{}", help="the arguments as a JSON object of strings"
        )
        prompt.add_argument("--json", action="store_true")
        level = sub.add_parser(
            "log-level", help="set the level of the server's log messages (a recorded logging/setLevel)"
        )
        level.add_argument("name")
        level.add_argument("level", choices=LOG_LEVELS)
        subscribe = sub.add_parser(
            "subscribe",
            help="subscribe to a resource and print each notifications/resources/updated as it comes",
        )
        subscribe.add_argument("name")
        subscribe.add_argument("uri")
        subscribe.add_argument(
            "--for", dest="seconds", type=float, default=30.0, help="how long to stay subscribed (seconds)"
        )
        subscribe.add_argument(
            "--call",
            default="",
            metavar="TOOL",
            help="once subscribed, call this tool on the same session (one that makes the server "
            "change the resource or start sending updates)",
        )
        subscribe.add_argument("--args", dest="arguments", default="{}", help="--call's arguments as JSON")
        auth = sub.add_parser(
            "auth", help="authorize with OAuth now (a recorded connect); later runs use the kept token"
        )
        auth.add_argument("name")
        auth.add_argument("--grant", choices=["authorization_code", "client_credentials"], default="")
        auth.add_argument("--client-id", default="", help="a pre-registered client")
        auth.add_argument("--client-secret", default="")
        auth.add_argument("--client-metadata-url", default="", help="a client ID metadata document (HTTPS)")
        auth.add_argument("--private-key-file", default="", help="client_credentials with a private-key JWT")
        auth.add_argument("--signing-alg", default="RS256")
        auth.add_argument("--scope", default="", help="the scope to ask for (default: as the server says)")
        auth.add_argument(
            "--issuer",
            default="",
            help="the issuer URL of the MCP server's authorization server, for client credentials and "
            "cross-app access: the client's credentials are sent only to it (client credentials "
            "without it: the server's protected resource metadata decides, which the MCP SDK deprecates)",
        )
        auth.add_argument("--idp-client-id", default="")
        auth.add_argument("--idp-id-token", default="")
        auth.add_argument("--idp-issuer", default="")
        auth.add_argument("--idp-token-endpoint", default="")

    def handle(self, *args: Any, **options: Any) -> None:
        try:
            self._dispatch(options)
        finally:
            # End the sessions while the interpreter still runs: left to the exit hook, an HTTP
            # session's DELETE could not even resolve "localhost" (the thread pool it needs is
            # already shut down), and the server was never told the session ended.
            gateway.close_all()

    def _dispatch(self, options: dict[str, Any]) -> None:
        action = options["action"]
        if action in host_commands.ACTIONS:
            host_commands.run(action, self._server(options["name"]), options, self.stdout)
        elif action == "add":
            self._add(options)
        elif action == "list":
            self._list()
        elif action == "tools":
            self._tools(self._server(options["name"]), as_json=options["json"])
        elif action == "call":
            self._call(
                self._server(options["name"]),
                options["tool"],
                options["arguments"],
                as_json=options["json"],
                elicitation=options["elicitation"],
                send_anyway=options["send_anyway"],
            )
        elif action == "resources":
            self._resources(self._server(options["name"]), as_json=options["json"])
        elif action == "read":
            self._read(self._server(options["name"]), options["uri"], as_json=options["json"])
        elif action == "prompts":
            self._prompts(self._server(options["name"]), as_json=options["json"])
        elif action == "auth":
            self._auth(self._server(options["name"]), options)
        elif action in parity.ACTIONS:
            parity.run(self, options)
        elif action == "log-level":
            self._log_level(self._server(options["name"]), options["level"])
        elif action == "subscribe":
            self._subscribe(
                self._server(options["name"]),
                options["uri"],
                seconds=options["seconds"],
                call=options["call"],
                raw=options["arguments"],
            )
        else:
            self._prompt(
                self._server(options["name"]),
                options["prompt"],
                options["arguments"],
                as_json=options["json"],
            )

    def _server(self, name: str) -> McpServer:
        try:
            return McpServer.objects.get(name=name)
        except McpServer.DoesNotExist:
            raise CommandError(f"no server named {name!r} (see: manage.py server list)") from None

    @staticmethod
    def _pairs(items: list[str], separator: str) -> dict[str, str]:
        pairs = {}
        for item in items:
            name, found, value = item.partition(separator)
            if not found:
                raise CommandError(f"{item!r}: write NAME{separator}VALUE")
            pairs[name.strip()] = value.strip() if separator == ":" else value
        return pairs

    def _add(self, options: dict[str, Any]) -> None:
        command = list(options["command"]) or list(self.stdio_command)
        if bool(command) == bool(options["url"]):
            raise CommandError("give either -- COMMAND [ARGS...] (stdio) or --url URL")
        transport = "stdio" if command else ("sse" if options["sse"] else "http")
        fields = {
            "name": options["name"],
            "transport": transport,
            "command": command[0] if command else "",
            "args": command[1:],
            "cwd": options["cwd"],
            "url": options["url"],
            "era": options["era"],
            "call_timeout": options["timeout"],
        }
        existing = McpServer.objects.filter(name=options["name"]).first()
        try:
            server = services.server_save(
                server=existing,
                owner=None,
                fields=fields,
                env=self._pairs(options["env"], "="),
                secret_env=self._pairs(options["secret_env"], "="),
                headers=self._pairs(options["header"], ":"),
                secret_headers=self._pairs(options["secret_header"], ":"),
                via="cli",
            )
        except Exception as exc:  # noqa: BLE001 — validation errors are the user's to fix
            raise CommandError(f"cannot save {options['name']!r}: {exc}") from None
        self.stdout.write(
            f"{'updated' if existing else 'added'} {server.name} ({server.get_transport_display()})"
        )

    def _list(self) -> None:
        for server in McpServer.objects.order_by("name"):
            reaches = f"{server.command} {' '.join(server.args)}" if server.spawns_process else server.url
            state = "enabled" if server.enabled else "disabled"
            self.stdout.write(f"{server.name:<20} {server.transport:<6} {server.era:<7} {state:<9} {reaches}")

    def _tools(self, server: McpServer, *, as_json: bool) -> None:
        operation = services.operation_start(
            server=server, user=None, kind=Operation.Kind.TOOLS_LIST, source=Operation.Source.CLI
        )
        if operation.status != Operation.Status.OK:
            raise CommandError(f"tools/list failed: {operation.error}")
        tools = operation.result if isinstance(operation.result, list) else []
        _, reports, overall = selectors.server_tool_reports(server=server, user=None)
        lint = {
            report.name: {
                "tokens": report.tokens,
                "findings": [{"level": f.level, "message": f.message} for f in report.findings],
            }
            for report in reports
        }
        if as_json:
            document = {
                "server": server.name,
                "operation": str(operation.public_id),
                "tools": tools,
                "lint": lint,
                "catalog_findings": [{"level": f.level, "message": f.message} for f in overall],
            }
            self.stdout.write(json.dumps(document, indent=2))
            return
        if not tools:
            self.stdout.write("no tools")
        by_name = {report.name: report for report in reports}
        for tool in tools:
            description = str(tool.get("description") or "").splitlines()
            tool_report = by_name.get(str(tool.get("name")))
            cost = (
                f"  [{tool_report.tokens} tokens]" if tool_report and tool_report.tokens is not None else ""
            )
            self.stdout.write(f"{tool.get('name')}: {description[0] if description else ''}{cost}")
            for finding in tool_report.findings if tool_report else []:
                self.stdout.write(f"    {finding.level}: {finding.message}")
        for finding in overall:
            self.stdout.write(f"{finding.level}: {finding.message}")

    def _call(
        self,
        server: McpServer,
        tool: str,
        raw: str,
        *,
        as_json: bool,
        elicitation: str = "",
        send_anyway: bool = False,
    ) -> None:
        try:
            arguments = json.loads(raw)
        except ValueError as exc:
            raise CommandError(f"--args is not JSON: {exc}") from None
        if not isinstance(arguments, dict):
            raise CommandError("--args must be a JSON object")
        definition = selectors.tool_definition(server=server, name=tool, user=None)
        errors: list[str] = []
        if definition is not None and isinstance(definition.get("inputSchema"), dict):
            errors = schema_errors(definition["inputSchema"], arguments)
            if errors and not send_anyway:
                raise CommandError(
                    "not sent: the arguments do not match the inputSchema (--send-anyway sends them "
                    "as they are):\n  " + "\n  ".join(errors)
                )
            if errors:
                self.stderr.write("sent anyway, recorded as deliberately invalid:\n  " + "\n  ".join(errors))
        operation = services.operation_start(
            server=server,
            user=None,
            kind=Operation.Kind.TOOLS_CALL,
            target=tool,
            arguments=arguments,
            source=Operation.Source.CLI,
            tool=definition,
            elicitation=elicitation,
            invalid_arguments=errors,
        )
        self._elicitations(operation, elicitation)
        if as_json:
            self.stdout.write(
                json.dumps(
                    {
                        "server": server.name,
                        "tool": tool,
                        "operation": str(operation.public_id),
                        "status": operation.status,
                        "error": operation.error,
                        "result": operation.result,
                        "exchanges": selectors.transcript_export(
                            exchanges=operation.exchanges.order_by("started_at", "seq", "id")
                        ),
                    },
                    indent=2,
                    ensure_ascii=False,
                )
            )
        else:
            if operation.error:
                self.stderr.write(f"error: {operation.error}")
            self._log_messages(operation)
            result = operation.result if isinstance(operation.result, dict) else {}
            for block in result.get("content") or []:
                if block.get("type") == "text":
                    self.stdout.write(str(block.get("text", "")))
                else:
                    self.stdout.write(f"[{block.get('type')} {block.get('mimeType', '')}]")
            if "structuredContent" in result:
                structured = json.dumps(result["structuredContent"], indent=2, ensure_ascii=False)
                self.stdout.write(f"structuredContent:\n{structured}")
            self._output_check(operation.output_check, listed=definition is not None)
            if result.get("isError"):
                self.stderr.write("the tool reported an error (isError: true)")
        if operation.status != Operation.Status.OK or operation.is_error:
            raise CommandError(
                f"{tool} ended with status {operation.status}" + (" (isError)" if operation.is_error else "")
            )

    def _auth(self, server: McpServer, options: dict[str, Any]) -> None:
        if server.spawns_process:
            raise CommandError(f"{server.name} is a stdio server: OAuth is for HTTP servers")
        grant = options["grant"] or ("cross_app" if options["idp_id_token"] else "authorization_code")
        values = {
            name: str(options[name])
            for name in (
                "client_id",
                "client_secret",
                "client_metadata_url",
                "signing_alg",
                "scope",
                "issuer",
                "idp_client_id",
                "idp_id_token",
                "idp_issuer",
                "idp_token_endpoint",
            )
        }
        if options["private_key_file"]:
            try:
                values["private_key"] = Path(options["private_key_file"]).read_text()
            except OSError as exc:
                raise CommandError(f"cannot read --private-key-file: {exc}") from None
        if grant == "client_credentials" and not (values["client_secret"] or values.get("private_key")):
            raise CommandError("--grant client_credentials needs --client-secret or --private-key-file")
        if grant in ("client_credentials", "cross_app") and not values["client_id"]:
            values["client_id"] = values["idp_client_id"]
        if grant == "client_credentials" and not values["client_id"]:
            raise CommandError("--grant client_credentials needs --client-id")
        if grant == "client_credentials" and not values["issuer"]:
            self.stdout.write(
                "note: no --issuer: the MCP server's protected resource metadata names the authorization "
                "server the client's credentials are sent to (give --issuer to fix it; the MCP SDK "
                "deprecates leaving it out)"
            )
        row = grant_configure(server=server, user=None, grant=grant, values=values)
        operation = services.operation_start(
            server=server,
            user=None,
            kind=Operation.Kind.CONNECT,
            source=Operation.Source.CLI,
            redirect=self._ask_for_callback,
        )
        row.refresh_from_db()
        if operation.status == Operation.Status.OK and not row.has_token:
            # Some servers let anyone connect and ask for authorization per request.
            operation = services.operation_start(
                server=server,
                user=None,
                kind=Operation.Kind.TOOLS_LIST,
                source=Operation.Source.CLI,
                redirect=self._ask_for_callback,
            )
            row.refresh_from_db()
            if operation.status == Operation.Status.OK and not row.has_token:
                self.stdout.write(
                    f"{server.name} asked for no authorization on connect or tools/list: the grant is "
                    "kept, and a later call that is refused authorizes then"
                )
                return
        if operation.status != Operation.Status.OK or not row.has_token:
            raise CommandError(
                f"authorization of {server.name} failed: {operation.error or 'no token was issued'}"
            )
        expires = f", expires {row.expires_at:%Y-%m-%d %H:%M:%S} UTC" if row.expires_at else ""
        self.stdout.write(
            f"authorized {server.name} ({GRANTS[grant]}): scope {row.scope or '(none named)'}{expires}; "
            f"the token is kept sealed for later server tools|call runs (operation {operation.public_id})"
        )

    async def _ask_for_callback(self, url: str) -> str:
        """The authorization server wants a person: print the URL, read back where it led."""
        self.stdout.write(f"open this URL to authorize:\n  {url}")
        if not sys.stdin.isatty():
            raise AuthorizationRequired("no terminal to finish the sign-in on; open the URL", url)
        self.stdout.write("then paste the URL the browser was sent back to (it carries ?code=...):")
        line: str = await asyncio.to_thread(sys.stdin.readline)
        if not line.strip():
            raise AuthorizationRequired("no callback URL was given", url)
        return line.strip()

    def _log_level(self, server: McpServer, level: str) -> None:
        operation = services.log_level_set(server=server, user=None, level=level, source=Operation.Source.CLI)
        self._log_messages(operation)
        if operation.status != Operation.Status.OK:
            raise CommandError(f"logging/setLevel failed: {operation.error}")
        self.stdout.write(f"log level of {server.name} set to {level} (sent again on each new session)")

    def _subscribe(self, server: McpServer, uri: str, *, seconds: float, call: str, raw: str) -> None:
        """The subscription runs in this process's workbench pool; this thread prints its updates
        as they are recorded and, with ``call``, calls a tool on the same pooled session."""
        if not 0 < seconds < float("inf"):
            raise CommandError("--for must be a positive number of seconds")
        if not 0 < len(uri) <= MAX_URI:
            raise CommandError(f"the URI must be 1 to {MAX_URI} characters long")
        try:
            arguments = json.loads(raw)
        except ValueError as exc:
            raise CommandError(f"--args is not JSON: {exc}") from None
        if not isinstance(arguments, dict):
            raise CommandError("--args must be a JSON object")
        operation = services.operation_start(
            server=server,
            user=None,
            kind=Operation.Kind.RESOURCE_SUBSCRIBE,
            target=uri,
            arguments={"seconds": seconds},
            source=Operation.Source.CLI,
            background=True,
        )
        shown = 0
        called = not call
        try:
            while True:
                operation.refresh_from_db()
                updates = operation_updates(operation=operation)
                for update in updates[shown:]:
                    self.stdout.write(f"{update.started_at:%H:%M:%S.%f}"[:12] + f" updated {uri}")
                shown = len(updates)
                if operation.is_finished:
                    break
                if not called and self._subscribed(operation):
                    called = True
                    self._side_call(server, call, arguments)
                time.sleep(SUBSCRIBE_POLL_SECONDS)
        except KeyboardInterrupt:
            services.operation_cancel(operation=operation)
            self.stderr.write("unsubscribing…")
            while not operation.is_finished:
                time.sleep(SUBSCRIBE_POLL_SECONDS)
                operation.refresh_from_db()
        self._log_messages(operation)
        if operation.status != Operation.Status.OK:
            raise CommandError(
                f"resources/subscribe {uri} ended with status {operation.status}: {operation.error}"
            )
        self.stdout.write(f"{shown} update{'s' if shown != 1 else ''} in all; unsubscribed from {uri}")

    @staticmethod
    def _subscribed(operation: Operation) -> bool:
        """The server has answered the subscription's resources/subscribe with success."""
        return operation.exchanges.filter(label="resources/subscribe", status="ok").exists()

    def _side_call(self, server: McpServer, tool: str, arguments: dict[str, Any]) -> None:
        called = services.operation_start(
            server=server,
            user=None,
            kind=Operation.Kind.TOOLS_CALL,
            target=tool,
            arguments=arguments,
            source=Operation.Source.CLI,
            tool=selectors.tool_definition(server=server, name=tool, user=None),
        )
        outcome = f"error: {called.error}" if called.error else called.status
        self.stderr.write(f"called {tool}: {outcome}")

    def _elicitations(self, operation: Operation, preset: str) -> None:
        """Each question the server asked and how ``--elicitation`` answered it, on stderr."""
        for question in operation.questions.filter(kind="elicitation"):
            params = question.params if isinstance(question.params, dict) else {}
            _, why = elicitation_preset_answer(preset=preset, params=params)
            content = (question.answer or {}).get("content")
            shown = f" {json.dumps(content, ensure_ascii=False)}" if content is not None else ""
            self.stderr.write(
                f"elicitation: {params.get('message', '')} -> {question.status}{shown}"
                + (f" ({why})" if why else "")
            )

    def _log_messages(self, operation: Operation) -> None:
        """The server's log messages (``notifications/message``) the operation received, on stderr."""
        for message in selectors.operation_log_messages(operation=operation):
            logger = f" {message['logger']}:" if message["logger"] else ""
            self.stderr.write(f"log [{message['level']}]{logger} {message['text']}")

    def _output_check(self, check: Any, *, listed: bool) -> None:
        """One line for ``operations.output_check``: valid, invalid (and why) or not checked."""
        if not listed:
            self.stdout.write(
                "output schema: not checked (the tool was never listed: run server tools first)"
            )
        elif not isinstance(check, dict) or not check:
            return
        elif not check.get("checked"):
            self.stdout.write(f"output schema: not checked ({check.get('reason', '')})")
        elif check.get("valid"):
            self.stdout.write("output schema: valid")
        else:
            self.stdout.write("output schema: INVALID")
            for error in check.get("errors") or []:
                self.stdout.write(f"    {error}")

    # --- resources and prompts ------------------------------------------------------------------

    def _run(self, server: McpServer, kind: str, target: str = "", arguments: Any = None) -> Operation:
        return services.operation_start(
            server=server,
            user=None,
            kind=kind,
            target=target,
            arguments=arguments,
            source=Operation.Source.CLI,
        )

    def _listed(self, server: McpServer, kind: str) -> list[dict[str, Any]]:
        operation = self._run(server, kind)
        if operation.status != Operation.Status.OK:
            raise CommandError(f"{kind} failed: {operation.error}")
        return operation.result if isinstance(operation.result, list) else []

    def _document(self, operation: Operation) -> str:
        return json.dumps(
            {
                "server": operation.server.name,
                "kind": operation.kind,
                "target": operation.target,
                "operation": str(operation.public_id),
                "status": operation.status,
                "error": operation.error,
                "result": operation.result,
                "exchanges": selectors.transcript_export(
                    exchanges=operation.exchanges.order_by("started_at", "seq", "id")
                ),
            },
            indent=2,
            ensure_ascii=False,
        )

    def _finished(self, operation: Operation) -> None:
        if operation.status != Operation.Status.OK:
            raise CommandError(
                f"{operation.kind} {operation.target} ended with status {operation.status}: {operation.error}"
            )

    def _resources(self, server: McpServer, *, as_json: bool) -> None:
        # Two list calls: one failing (mcp-server-sqlite has no templates) keeps the other's answer.
        listed = {
            kind: self._run(server, kind)
            for kind in (Operation.Kind.RESOURCES_LIST, Operation.Kind.TEMPLATES_LIST)
        }
        failed = [operation for operation in listed.values() if operation.status != Operation.Status.OK]
        resources = self._items(listed[Operation.Kind.RESOURCES_LIST])
        templates = self._items(listed[Operation.Kind.TEMPLATES_LIST])
        if as_json:
            document: dict[str, Any] = {"server": server.name, "resources": resources, "templates": templates}
            document["failed"] = {operation.kind: operation.error for operation in failed}
            self.stdout.write(json.dumps(document, indent=2))
        else:
            ok = {kind for kind, operation in listed.items() if operation.status == Operation.Status.OK}
            for resource in resources:
                self.stdout.write(
                    f"{resource.get('uri')}  {resource.get('name', '')}  {resource.get('mimeType', '')}".rstrip()
                )
            if not resources and Operation.Kind.RESOURCES_LIST in ok:
                self.stdout.write("no resources")
            for template in templates:
                self.stdout.write(
                    f"{template.get('uriTemplate')}  (template) {template.get('name', '')}".rstrip()
                )
            if not templates and Operation.Kind.TEMPLATES_LIST in ok:
                self.stdout.write("no resource templates")
        for operation in failed:
            self.stderr.write(f"{operation.kind} failed: {operation.error}")
        if failed:
            kept = " (what the other returned is printed above)" if len(failed) < len(listed) else ""
            raise CommandError(f"{len(failed)} of {len(listed)} list calls failed{kept}")

    @staticmethod
    def _items(operation: Operation) -> list[dict[str, Any]]:
        result = operation.result
        return list(result) if operation.status == Operation.Status.OK and isinstance(result, list) else []

    def _read(self, server: McpServer, uri: str, *, as_json: bool) -> None:
        operation = self._run(server, Operation.Kind.RESOURCE_READ, uri)
        if as_json:
            self.stdout.write(self._document(operation))
        else:
            result = operation.result if isinstance(operation.result, dict) else {}
            for content in result.get("contents") or []:
                if "text" in content:
                    self.stdout.write(str(content["text"]))
                else:
                    size = len(str(content.get("blob") or "")) * 3 // 4
                    self.stdout.write(f"[blob {content.get('mimeType', '')} {size} bytes]")
        self._finished(operation)

    def _prompts(self, server: McpServer, *, as_json: bool) -> None:
        prompts = self._listed(server, Operation.Kind.PROMPTS_LIST)
        if as_json:
            self.stdout.write(json.dumps({"server": server.name, "prompts": prompts}, indent=2))
            return
        if not prompts:
            self.stdout.write("no prompts")
        for prompt in prompts:
            arguments = ", ".join(
                f"{a.get('name')}{'*' if a.get('required') else ''}" for a in prompt.get("arguments") or []
            )
            self.stdout.write(f"{prompt.get('name')}({arguments}): {prompt.get('description', '')}")

    def _prompt(self, server: McpServer, name: str, raw: str, *, as_json: bool) -> None:
        try:
            arguments = json.loads(raw)
        except ValueError as exc:
            raise CommandError(f"--args is not JSON: {exc}") from None
        if not isinstance(arguments, dict):
            raise CommandError("--args must be a JSON object")
        operation = self._run(
            server, Operation.Kind.PROMPT_GET, name, {str(k): str(v) for k, v in arguments.items()}
        )
        if as_json:
            self.stdout.write(self._document(operation))
        else:
            result = operation.result if isinstance(operation.result, dict) else {}
            for message in result.get("messages") or []:
                content = message.get("content") or {}
                shown = content.get("text") if content.get("type") == "text" else f"[{content.get('type')}]"
                self.stdout.write(f"{message.get('role')}: {shown}")
        self._finished(operation)
