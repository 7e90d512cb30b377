"""The MCP recording proxies: stdio (``manage.py proxy stdio``) and HTTP (``/proxy/<key>/mcp/<server>``)."""
