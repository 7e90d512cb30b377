"""Host presets (``presets``) and what they make of a server's tools (``present``): docs/hosts.md."""

from conversations.loop.hosts.present import (
    Change,
    HostView,
    Presented,
    Refusal,
    diff,
    host_name,
    present_catalog,
    present_tool,
    tools_as_host,
    wire_definition,
)
from conversations.loop.hosts.presets import HOST_CHOICES, HOSTS, HostPreset, Rule

__all__ = [
    "HOSTS",
    "HOST_CHOICES",
    "Change",
    "HostPreset",
    "HostView",
    "Presented",
    "Refusal",
    "Rule",
    "diff",
    "host_name",
    "present_catalog",
    "present_tool",
    "tools_as_host",
    "wire_definition",
]
