"""The host presets for templates (the server page's Hosts section links to each)."""

from __future__ import annotations

from django import template

from conversations.loop.hosts import HOSTS, HostPreset

register = template.Library()


@register.simple_tag
def host_presets() -> list[HostPreset]:
    """Every host preset, in the registry's order."""
    return list(HOSTS.values())
