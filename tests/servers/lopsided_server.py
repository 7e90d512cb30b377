"""A small stdio MCP server for the tests whose catalogue is lopsided on purpose.

It advertises resources and lists one, but answers ``resources/templates/list`` with an error
(as mcp-server-sqlite does), and offers nothing else: no tools, no prompts, no logging, no
completions. Run as ``python tests/servers/lopsided_server.py``.
"""

from __future__ import annotations

import anyio
import mcp.types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError


async def list_resources(context: object, params: object) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[types.Resource(uri="memo://insights", name="insights", mime_type="text/plain")]
    )


async def list_templates(context: object, params: object) -> types.ListResourceTemplatesResult:
    raise MCPError(code=types.METHOD_NOT_FOUND, message="Method not found")


server: Server[object] = Server(
    "lopsided", version="1.0", on_list_resources=list_resources, on_list_resource_templates=list_templates
)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
