"""Which server capability each client request needs, and why a request is not sent.

A server says in its ``initialize`` result (or its ``server/discover`` result) which features
it offers; a client sends a feature's requests only to a server that advertised it
(docs/mcp-client.md §3). Pure functions over the capabilities as JSON: the gateway refuses
before sending, the workbench disables the button with the same reason.
"""

from __future__ import annotations

from typing import Any

# Request method -> the capability the server must have advertised. ``tools/*`` too: the spec
# makes a server that offers tools declare ``tools``, and both sides use only what was negotiated
# (docs/mcp-client.md §3); a turn's server without it is connected and offers no tools, and says why.
REQUIRED: dict[str, str] = {
    "tools/list": "tools",
    "tools/call": "tools",
    "resources/list": "resources",
    "resources/templates/list": "resources",
    "resources/read": "resources",
    # A sub-capability: ``resources: {"subscribe": true}``.
    "resources/subscribe": "resources.subscribe",
    "resources/unsubscribe": "resources.subscribe",
    "prompts/list": "prompts",
    "prompts/get": "prompts",
    "completion/complete": "completions",
    "logging/setLevel": "logging",
}


class CapabilityMissing(Exception):
    """The server did not advertise what a request needs; the request was not sent."""


def unavailable(server_name: str, capability: str, capabilities: dict[str, Any] | None) -> str:
    """Why ``capability``'s requests are not sent to the server, or "" when they may be.

    ``capability`` is a top-level name (``prompts``) or a flag inside one (``resources.subscribe``,
    which must be ``true``).
    """
    if capabilities is None:
        return ""
    name, _, flag = capability.partition(".")
    if name not in capabilities:
        return f"{server_name} does not advertise the {name} capability"
    if flag:
        inner = capabilities[name]
        if not isinstance(inner, dict) or inner.get(flag) is not True:
            return f"{server_name} does not advertise {capability}"
    return ""


def refusal(server_name: str, method: str, capabilities: dict[str, Any] | None) -> str:
    """The message for ``method`` not sent, or "" when the server advertised what it needs."""
    capability = REQUIRED.get(method)
    reason = unavailable(server_name, capability, capabilities) if capability else ""
    return f"{reason}: {method} was not sent" if reason else ""
