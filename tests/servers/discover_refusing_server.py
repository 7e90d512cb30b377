"""A stdio MCP server of the initialize era that refuses ``server/discover`` the way servers built
on older SDKs do: not with "method not found" but with the error its framework gives an unknown
request (``-32602 Invalid request parameters`` by default; ``-32000 Bad Request: Server not
initialized`` with the argument ``not-initialized``)."""

from __future__ import annotations

import json
import sys

REFUSALS = {
    "invalid-params": {"code": -32602, "message": "Invalid request parameters"},
    "not-initialized": {"code": -32000, "message": "Bad Request: Server not initialized"},
}


def main() -> None:
    refusal = REFUSALS[sys.argv[1] if len(sys.argv) > 1 else "invalid-params"]
    for line in sys.stdin:
        message = json.loads(line)
        if "id" not in message:
            continue
        if message.get("method") == "initialize":
            answer = {
                "result": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {"tools": {}},
                    "serverInfo": {"name": "old-sdk", "version": "1.0"},
                }
            }
        elif message.get("method") == "tools/list":
            answer = {"result": {"tools": []}}
        else:
            answer = {"error": refusal}
        sys.stdout.write(json.dumps({"jsonrpc": "2.0", "id": message["id"], **answer}) + "\n")
        sys.stdout.flush()


if __name__ == "__main__":
    main()
