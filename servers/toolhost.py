"""A turn's MCP servers through the gateway: the ``conversations.loop.toolhost`` contract's
implementation, registered when the app starts (``servers.apps``).

``conversation_servers`` reads a conversation's servers; ``GatewayServers.connect`` lists their
tools over the pooled sessions; ``GatewayToolHost`` is the agent's ``ToolHost``, calling them.

An HTTP server is reached with the OAuth grant of the user who asked the turn (the owner, or a
team mate in a shared conversation): its token (refreshed when due, and sealed back after each
listing and call) on a pooled session of that grant's own. A team mate without a grant uses the
owner's only when its owner shared it with the team (``OAuthGrant.shared_with_team``, set on the
server page and audited); otherwise the server's 401 says clearly that it needs authorization,
with the server page's Connect link. Nobody else's grant is ever used.

Every server of a turn is reached on a pooled session of the conversation's owner (its
``ServerConfig.user_id``): the state a server keeps per session (a stdio process's memory) is
shared by that owner's turns and operations, never with another user's.
"""

from __future__ import annotations

from dataclasses import dataclass, field, replace
from typing import Any

from django.urls import reverse

from conversations.loop.agent import ToolRun
from conversations.loop.llm import ToolDef, provider_tool_names
from conversations.loop.toolhost import Connected, StopSignal
from conversations.loop.wire import WireExchange
from conversations.models import Conversation
from conversations.record.exchanges import server_records_store
from conversations.redaction import Redactor
from conversations.typealias import JSONDict
from servers import gateway
from servers.gateway.config import ServerConfig
from servers.gateway.oauth import OAuthSettings
from servers.grants import grant_for_user, grant_keep, grant_settings, redactor_guarded, run_secrets
from servers.mcp_apps import model_visible
from servers.models import McpServer, OAuthGrant
from servers.operations import output_check
from servers.selectors import server_spawn_refusal


@dataclass
class GatewayToolHost:
    """The agent's ``ToolHost``: calls go through the pooled gateway sessions.

    With a ``signal``, a call in flight when it is set is abandoned: the server is sent
    ``notifications/cancelled`` (in the call's records) and the run's error says who stopped it.
    """

    configs: dict[int, ServerConfig]
    redact: Redactor
    signal: StopSignal | None = None
    # By server id: the owner's grant a server is reached with (what a refresh obtains is kept).
    grants: dict[int, OAuthGrant] = field(default_factory=dict)

    def call(self, tool: ToolDef, arguments: JSONDict, *, call_id: str | None = None) -> ToolRun:
        config = self.configs[tool.server_id]
        outcome = gateway.call_tool(config, tool.name, arguments, stop=self.signal, call_id=call_id)
        _keep(self.grants.get(tool.server_id), config.oauth)
        # A token obtained during the turn (a refresh) is unknown to the turn's redactor:
        # a server repeating it must not get it into the result.
        guard = redactor_guarded(self.redact, config.oauth)
        if guard is not self.redact:
            masked = guard.json(outcome.result) if outcome.result is not None else None
            outcome.result = masked if isinstance(masked, dict) else None
            outcome.error = guard.text(outcome.error)
        # The call's own records were masked as they were captured: the gateway's tap learns
        # each credential a refresh obtains (``Tap.learn``) before the request goes out.
        server_records_store(outcome.unclaimed, redact=guard)
        if outcome.cancelled and self.signal is not None and self.signal.stopped:
            return ToolRun(
                result=None,
                error=f"the call was abandoned ({self.signal.stopped}); the server was sent notifications/cancelled",
                exchanges=outcome.records,
            )
        notes = []
        if outcome.session is not None and outcome.session.spawned:
            reason = outcome.session.respawn_reason or "no session was open"
            notes.append(f"respawned the server (session #{outcome.session.generation}) because {reason}")
        error = outcome.error
        check = output_check(outcome.result, {"outputSchema": tool.output_schema})
        if not error and check.get("checked") and not check.get("valid"):
            # Checked against the listing the model saw; the result is kept with the error.
            error = "the result does not match the tool's outputSchema: " + "; ".join(check["errors"])
        return ToolRun(result=outcome.result, error=error, exchanges=outcome.records, notes=notes)


def _keep(grant: OAuthGrant | None, oauth: OAuthSettings | None) -> None:
    if grant is not None and oauth is not None:
        grant_keep(grant=grant, oauth=oauth)


def _turn_grant(server: McpServer, asker_id: int | None, owner_id: int | None) -> OAuthGrant | None:
    """The authorized grant a turn asked by ``asker_id`` reaches an HTTP ``server`` with (None:
    the server is reached without): the asker's own, else the conversation owner's if the
    owner shared it with the team (a team mate may ask only in a conversation they can see)."""
    if server.spawns_process:
        return None
    asker_id = asker_id if asker_id is not None else owner_id
    if asker_id is None:
        return None
    own = grant_for_user(server=server, user_id=asker_id)
    if own is not None and own.has_token:
        return own
    if owner_id is None or owner_id == asker_id:
        return None
    shared = grant_for_user(server=server, user_id=owner_id)
    return shared if shared is not None and shared.shared_with_team and shared.has_token else None


def _session_note(server: McpServer, outcome: gateway.ListOutcome) -> str:
    session = outcome.session
    if session is None:
        return f"{server.name}: {outcome.error}"
    identity = f"{session.server_name} {session.server_version}".strip() or "unnamed server"
    if session.spawned and session.respawn_reason:
        how = f"respawned (session #{session.generation}) because {session.respawn_reason}"
    elif session.spawned:
        how = f"connected (session #{session.generation})"
    else:
        how = f"reused pooled session #{session.generation}"
    note = (
        f"{server.name}: {how}; {identity}; protocol {session.protocol_version}; {len(outcome.tools)} tools"
    )
    return note + (f"; error: {outcome.error}" if outcome.error else "")


@dataclass
class GatewayServers:
    """A conversation's servers (implements ``conversations.loop.toolhost.TurnServers``)."""

    conversation: Conversation
    # By name: the order their tools are offered in.
    servers: list[McpServer]
    # Who asked the turn (None: the owner): whose OAuth grants are used.
    asked_by_id: int | None = None

    @property
    def enabled(self) -> int:
        return sum(1 for server in self.servers if server.enabled)

    def _grant(self, server: McpServer) -> OAuthGrant | None:
        return _turn_grant(server, self.asked_by_id, self.conversation.owner_id)

    def secrets(self) -> list[str]:
        """What each enabled server's run carries (``servers.grants.run_secrets``, the list
        workbench operations use too): its sealed and ``${VAR}`` values, and the credentials of
        the grant the turn will use (its tokens, client secret...)."""
        secrets: list[str] = []
        for server in self.servers:
            grant = self._grant(server) if server.enabled else None
            secrets.extend(run_secrets(server=server, oauth=grant_settings(grant=grant) if grant else None))
        return secrets

    def connect(self, *, redact: Redactor, signal: StopSignal | None) -> Connected:
        """List the tools of every enabled server and name them for the provider.

        A server whose process the conversation's owner may not start (``server_spawn_refusal``)
        is not connected: its note says so, its problem says why, and the others are connected.
        """
        servers = [server for server in self.servers if server.enabled]
        owner = self.conversation.owner
        configs: dict[int, ServerConfig] = {}
        grants: dict[int, OAuthGrant] = {}
        listed: list[tuple[McpServer, dict[str, Any]]] = []
        notes: list[str] = []
        problems: list[str] = []
        records: list[WireExchange] = []
        sessions: JSONDict = {}
        for server in servers:
            if signal is not None and signal.stopped:
                problems.append(f"{server.name}: not connected ({signal.stopped})")
                continue
            refusal = server_spawn_refusal(server=server, user=owner)
            if refusal:
                notes.append(f"{server.name}: not connected")
                problems.append(refusal)
                continue
            grant = self._grant(server)
            # No redirect: nobody can sign in during a turn, so a grant whose token cannot be
            # refreshed ends in a clear "needs authorization", never a wait.
            oauth = grant_settings(grant=grant) if grant is not None else None
            # The owner's session: a team mate asking shares the conversation's, nobody else does.
            config = replace(server.to_config(oauth=oauth), user_id=self.conversation.owner_id)
            configs[server.pk] = config
            if grant is not None:
                grants[server.pk] = grant
            outcome = gateway.list_tools(config, stop=signal)
            _keep(grant, oauth)
            records.extend(outcome.records)
            server_records_store(outcome.unclaimed, redact=redact)
            notes.append(_session_note(server, outcome))
            if outcome.error:
                connect = ""
                if not server.spawns_process and "needs authorization" in outcome.error:
                    connect = f" Connect: {reverse('servers-detail', args=[server.name])}"
                problems.append(f"{server.name}: {outcome.error}{connect}")
            if outcome.session is not None:
                sessions[server.name] = {
                    "generation": outcome.session.generation,
                    "spawned": outcome.session.spawned,
                    "respawn_reason": outcome.session.respawn_reason,
                    "protocol_version": outcome.session.protocol_version,
                    "server": outcome.session.server_name,
                    "version": outcome.session.server_version,
                }
            hidden = [str(tool.get("name")) for tool in outcome.tools if not model_visible(tool)]
            if hidden:
                notes.append(
                    f"{server.name}: not offered to the model, for its apps only "
                    f"(_meta.ui.visibility): {', '.join(hidden)}"
                )
            listed.extend((server, tool) for tool in outcome.tools if model_visible(tool))
        names = provider_tool_names([(server.name, str(tool["name"])) for server, tool in listed])
        tools = [
            ToolDef(
                server_id=server.pk,
                server_name=server.name,
                name=str(tool["name"]),
                provider_name=name,
                description=str(tool.get("description") or ""),
                input_schema=tool.get("inputSchema") or {"type": "object", "properties": {}},
                title=str(tool.get("title") or ""),
                output_schema=tool.get("outputSchema"),
                annotations=tool.get("annotations"),
                meta=tool["_meta"] if isinstance(tool.get("_meta"), dict) else None,
            )
            for (server, tool), name in zip(listed, names, strict=True)
        ]
        return Connected(
            host=GatewayToolHost(configs, redact, signal, grants),
            tools=tools,
            notes=notes,
            problems=problems,
            sessions=sessions,
            records=records,
        )


def conversation_servers(conversation: Conversation, asked_by_id: int | None = None) -> GatewayServers:
    """The conversation's servers, read once, by name (``conversations.loop.toolhost.ServerSource``),
    for a turn ``asked_by_id`` asked."""
    return GatewayServers(
        conversation, list(McpServer.objects.filter(conversations=conversation).order_by("name")), asked_by_id
    )
