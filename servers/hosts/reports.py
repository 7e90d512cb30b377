"""What ``server hosts`` and the server's Hosts page show: each tool as each host sends it."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from conversations.counting import tools_as_sent
from conversations.loop.hosts import HOSTS, HostPreset, HostView, present_catalog
from conversations.typealias import JSONDict
from servers.models import McpServer, Operation
from servers.selectors import Listing, Viewer, server_listing


class UnknownHost(ValueError):
    """A host name no preset has; the message lists the ones there are."""


def hosts_named(names: Iterable[str]) -> list[HostPreset]:
    """The presets by name, in the order given (all of them when none is named).

    Raises:
        UnknownHost: a name is not a preset's.
    """
    wanted = list(dict.fromkeys(names))
    unknown = [name for name in wanted if name not in HOSTS]
    if unknown:
        raise UnknownHost(
            f"no host preset named {', '.join(map(repr, unknown))}; the presets are: {', '.join(HOSTS)}"
        )
    return [HOSTS[name] for name in wanted] if wanted else list(HOSTS.values())


def host_views(
    server_name: str, tools: Sequence[Mapping[str, Any]], presets: Sequence[HostPreset]
) -> list[HostView]:
    """The server's tools as each preset's host sends them (the server's own tools only: the
    catalog rules see this server alone)."""
    pairs = [(server_name, tool if isinstance(tool, Mapping) else {}) for tool in tools]
    return [present_catalog(preset, pairs) for preset in presets]


def hosts_document(
    *,
    server: McpServer,
    tools: Sequence[Mapping[str, Any]],
    presets: Sequence[HostPreset],
    operation: str = "",
) -> JSONDict:
    """The ``server hosts --json`` document (docs/hosts.md, "The --json documents")."""
    views = host_views(server.name, tools, presets)
    return {
        "server": server.name,
        "operation": operation,
        "tools": len(tools),
        "verdicts": {view.preset.key: view.verdict for view in views},
        "hosts": [view.as_json() for view in views],
    }


@dataclass(frozen=True)
class ListedTools:
    """The tools of the newest listing a viewer may see, as the server sent them."""

    listing: Listing
    tools: list[Mapping[str, Any]]


def listed_tools(*, server: McpServer, user: Viewer) -> ListedTools:
    """The newest ``tools/list`` of ``server`` that ``user`` may see (their own, their team's;
    everything for staff and the system), each definition with its members in the order the
    server sent them."""
    listing = server_listing(server=server, kind=Operation.Kind.TOOLS_LIST, user=user)
    bodies = listing.operation.exchanges.values_list("response_body", flat=True) if listing.operation else []
    # Only objects are definitions (the SDK's parsing keeps anything else out of a listing, but
    # a stored row is shown whatever it holds).
    items = [item for item in listing.items if isinstance(item, dict)]
    return ListedTools(listing, tools_as_sent(items, bodies))
