"""The recording proxies' record: proxy keys, proxy sessions (each one a conversation) and the
recording of a host's model calls and MCP traffic into them (docs/proxy.md)."""
