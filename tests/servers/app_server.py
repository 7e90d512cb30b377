"""A small stdio MCP server with MCP Apps (tool UIs), for the tests of the workbench's app host.

``counter`` has a UI (``ui://counter/app.html``) that speaks the app side of the postMessage
protocol by hand: it initializes, shows the tool input and result it is sent, calls
``increment`` through the host, sends a message, asks for a height, and writes into its own
page what it could and could not reach of the page that frames it. ``increment`` is a plain
tool. ``hostile`` has a UI that floods the host with huge, malformed and deeply nested
messages, then asks for a height (so a test sees the page survived). Run as
``python tests/servers/app_server.py``.
"""

from __future__ import annotations

import anyio
import mcp.types as types
from mcp.server.lowlevel.server import Server
from mcp.server.stdio import stdio_server
from mcp.shared.exceptions import MCPError

MIME = "text/html;profile=mcp-app"

# The app side of the protocol, written by hand: no SDK, so the test sees the raw messages.
COUNTER_APP = """<!doctype html>
<html><head><meta charset="utf-8"><title>counter</title></head>
<body>
<h1>Counter app</h1>
<p id="input">no input yet</p>
<p id="result">no result yet</p>
<p id="called">not called yet</p>
<p id="cookie"></p>
<p id="parent"></p>
<script>
let next = 1;
const pending = {};
function request(method, params) {
  const id = next++;
  window.parent.postMessage({jsonrpc: "2.0", id, method, params}, "*");
  return new Promise((resolve, reject) => { pending[id] = {resolve, reject}; });
}
function notify(method, params) { window.parent.postMessage({jsonrpc: "2.0", method, params}, "*"); }
function text(result) { return (result.content || []).map((c) => c.text || "").join(" "); }
try { document.getElementById("cookie").textContent = "cookie: " + JSON.stringify(document.cookie); }
catch (e) { document.getElementById("cookie").textContent = "cookie blocked: " + e.name; }
try { document.getElementById("parent").textContent = "parent title: " + window.parent.document.title; }
catch (e) { document.getElementById("parent").textContent = "parent blocked: " + e.name; }
window.addEventListener("message", async (event) => {
  if (event.source !== window.parent) return;
  const m = event.data;
  if (m.id !== undefined && pending[m.id]) {
    const p = pending[m.id]; delete pending[m.id];
    if (m.error) p.reject(new Error(m.error.message)); else p.resolve(m.result);
    return;
  }
  if (m.method === "ui/notifications/tool-input") {
    document.getElementById("input").textContent = "input: " + JSON.stringify(m.params.arguments);
  }
  if (m.method === "ui/notifications/tool-result") {
    document.getElementById("result").textContent = "result: " + text(m.params);
    const called = await request("tools/call", {name: "increment", arguments: {by: 41}});
    document.getElementById("called").textContent = "called: " + text(called);
    try { await request("tools/call", {name: "not-a-tool", arguments: {}}); }
    catch (e) { document.getElementById("called").dataset.refused = e.message; }
    await request("ui/message", {role: "user", content: [{type: "text", text: "<b>counter says hi</b>"}]});
    notify("ui/notifications/size-changed", {height: 321});
  }
});
request("ui/initialize", {
  protocolVersion: "2026-01-26", appInfo: {name: "counter-app", version: "1"}, appCapabilities: {}
}).then((init) => {
  document.body.dataset.host = init.hostInfo.name;
  notify("ui/notifications/initialized", {});
});
</script>
</body></html>
"""

HOSTILE_APP = """<!doctype html>
<html><head><meta charset="utf-8"></head><body><p id="done">working</p>
<script>
const parent = {postMessage(message) { try { window.parent.postMessage(message, "*"); } catch (e) { document.body.dataset.unsent = e.name; } }};
parent.postMessage("just a string", "*");
parent.postMessage({jsonrpc: "2.0", method: 42}, "*");
parent.postMessage({jsonrpc: "2.0", id: {}, method: "tools/call", params: "nope"}, "*");
parent.postMessage({jsonrpc: "2.0", method: "ui/notifications/size-changed", params: {height: "<img src=x>"}}, "*");
parent.postMessage({jsonrpc: "2.0", method: "ui/message", params: {content: [{type: "text", text: "<script>alert(1)<\\/script>"}]}}, "*");
parent.postMessage({jsonrpc: "2.0", method: "ui/open-link", id: 9, params: {url: "javascript:alert(1)"}}, "*");
parent.postMessage({jsonrpc: "2.0", method: "x".repeat(5000), params: {huge: "A".repeat(3000000)}}, "*");
let deep = {}; const root = deep;
for (let i = 0; i < 20000; i++) { deep.a = {}; deep = deep.a; }
parent.postMessage({jsonrpc: "2.0", method: "deep", params: root}, "*");
const cyclic = {jsonrpc: "2.0", method: "cyclic"}; cyclic.self = cyclic;
parent.postMessage(cyclic, "*");
parent.postMessage({jsonrpc: "2.0", method: "bad\\ud800surrogate\\u0000nul"}, "*");
for (let i = 0; i < 300; i++) parent.postMessage({jsonrpc: "2.0", method: "notifications/message", params: {i}}, "*");
parent.postMessage({jsonrpc: "2.0", method: "ui/notifications/size-changed", params: {height: 99999}}, "*");
document.getElementById("done").textContent = "sent";
</script></body></html>
"""

TOOLS = [
    types.Tool(
        name="counter",
        description="Shows a counter; its UI adds to it through the host.",
        input_schema={"type": "object", "properties": {"start": {"type": "integer"}}},
        _meta={"ui": {"resourceUri": "ui://counter/app.html"}},
    ),
    types.Tool(
        name="increment",
        description="Adds to the counter.",
        input_schema={"type": "object", "properties": {"by": {"type": "integer"}}, "required": ["by"]},
        _meta={"ui": {"visibility": ["app"]}},
    ),
    types.Tool(
        name="hostile",
        description="A tool whose UI misbehaves.",
        input_schema={"type": "object", "properties": {}},
        _meta={"ui/resourceUri": "ui://hostile/app.html"},
    ),
]
APPS = {
    "ui://counter/app.html": (
        COUNTER_APP,
        {"csp": {"connectDomains": ["https://api.example.com", "'unsafe-eval'; x"]}},
    ),
    "ui://hostile/app.html": (HOSTILE_APP, {}),
}


async def list_tools(context: object, params: object) -> types.ListToolsResult:
    return types.ListToolsResult(tools=TOOLS)


async def call_tool(context: object, params: types.CallToolRequestParams) -> types.CallToolResult:
    arguments = params.arguments or {}
    if params.name == "counter":
        text = f"counter at {arguments.get('start', 1)}"
    elif params.name == "increment":
        text = f"counter at {1 + int(arguments.get('by', 1))}"
    elif params.name == "hostile":
        text = "hostile app ready"
    else:
        raise MCPError(code=types.INVALID_PARAMS, message=f"unknown tool {params.name}")
    return types.CallToolResult(content=[types.TextContent(type="text", text=text)])


async def list_resources(context: object, params: object) -> types.ListResourcesResult:
    return types.ListResourcesResult(
        resources=[types.Resource(uri=uri, name=uri, mime_type=MIME) for uri in APPS]
    )


async def read_resource(context: object, params: types.ReadResourceRequestParams) -> types.ReadResourceResult:
    html, ui = APPS[str(params.uri)]
    return types.ReadResourceResult(
        contents=[types.TextResourceContents(uri=params.uri, mime_type=MIME, text=html, _meta={"ui": ui})]
    )


server: Server[object] = Server(
    "app-server",
    version="1.0",
    on_list_tools=list_tools,
    on_call_tool=call_tool,
    on_list_resources=list_resources,
    on_read_resource=read_resource,
)


async def main() -> None:
    async with stdio_server() as (read_stream, write_stream):
        await server.run(read_stream, write_stream, server.create_initialization_options())


if __name__ == "__main__":
    anyio.run(main)
