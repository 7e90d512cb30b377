"""The MCP side of a turn as the runner sees it: one small contract, implemented by ``servers``.

Imports run one way, ``servers`` → ``conversations`` (docs/ARCHITECTURE.md, Import layering), so
the runner never names the gateway or a server model: it asks ``turn_servers`` for the
conversation's servers, connects them, and hands the loop the ``ToolHost`` it gets back.
``servers`` registers its implementation (``servers.toolhost``) in its ``AppConfig.ready()``.
Like the loop, this module loads no framework.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Protocol

from conversations.loop.agent import ToolHost
from conversations.loop.llm import ToolDef
from conversations.loop.wire import WireExchange
from conversations.redaction import Redactor
from conversations.typealias import JSONDict

if TYPE_CHECKING:
    from conversations.models import Conversation


class StopSignal(Protocol):
    """Tells the MCP side to give up (``lifecycle.TurnSignal``): a call in flight is abandoned."""

    @property
    def stopped(self) -> str:
        """Why the turn must stop ("" while it need not)."""
        ...

    def on_stop(self, listener: Callable[[], None]) -> Callable[[], None]:
        """Call ``listener`` once when stopped (at once if already); returns an undo."""
        ...


@dataclass
class Connected:
    """What connecting a turn's servers gave: the host the loop calls their tools through, the
    tools they listed (named for the provider, in the order offered), and what the turn's
    ``connect`` step records of it."""

    host: ToolHost
    tools: list[ToolDef]
    # One line per server: its session (or why it was not connected).
    notes: list[str] = field(default_factory=list)
    # What went wrong (the step is an error if anything did).
    problems: list[str] = field(default_factory=list)
    # By server name: the session the tools were listed on.
    sessions: JSONDict = field(default_factory=dict)
    # The listings' messages on the wire.
    records: list[WireExchange] = field(default_factory=list)


class TurnServers(Protocol):
    """A conversation's MCP servers, read once when its turn starts."""

    @property
    def enabled(self) -> int:
        """How many will be connected (the enabled ones)."""
        ...

    def secrets(self) -> list[str]:
        """The secret values the servers' configuration resolves to in this process, never to be
        written anywhere even if a server echoes them back."""
        ...

    def connect(self, *, redact: Redactor, signal: StopSignal | None) -> Connected:
        """List the tools of every enabled server the conversation's owner may start; never
        raises for a server that fails (its problem is in ``Connected.problems``). Messages that
        belong to no listing are stored, redacted with ``redact``. A server not reached before
        ``signal`` is set is not connected."""
        ...


# The conversation, and the id of the user who asked the turn (their OAuth grants are used).
ServerSource = Callable[["Conversation", int | None], TurnServers]

_source: ServerSource | None = None


def server_source_register(source: ServerSource) -> None:
    """Make ``source`` the one that gives each conversation's servers (the last registered wins)."""
    global _source
    _source = source


def turn_servers(conversation: Conversation, *, asked_by_id: int | None = None) -> TurnServers:
    """The conversation's MCP servers, from the registered source, for a turn ``asked_by_id``
    asked (None: the conversation's owner).

    Raises:
        RuntimeError: no source is registered (the ``servers`` app is not installed or loaded).
    """
    if _source is None:
        raise RuntimeError("no MCP server source is registered: is the servers app installed?")
    return _source(conversation, asked_by_id)
