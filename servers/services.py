"""Writes about MCP servers."""

from __future__ import annotations

import sys

from django.conf import settings

from servers.models import McpServer

DEMO_SERVER_NAME = "demo"


def demo_server_ensure() -> McpServer:
    """The bundled teaching server over stdio, run by this installation's own interpreter."""
    server, _ = McpServer.objects.update_or_create(
        name=DEMO_SERVER_NAME,
        defaults={
            "description": "Bundled teaching server: weather forecast, calculator, unit converter, notes.",
            "transport": "stdio",
            "command": sys.executable,
            "args": ["-m", "servers.demo_server"],
            "cwd": str(settings.BASE_DIR),
            "era": "legacy",
            "is_demo": True,
            "enabled": True,
        },
    )
    return server
