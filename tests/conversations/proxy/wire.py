"""Captured records as the proxies hand them to the recorder: a model call in each format and
MCP JSON-RPC pairs."""

from __future__ import annotations

import json
from typing import Any

from django.utils import timezone

from conversations.loop.wire import WireExchange


def chat_call(
    *,
    question: str = "What time is it in Tokyo?",
    calls: list[tuple[str, str, dict[str, Any]]] = (),  # type: ignore[assignment]
    text: str = "",
    tool_results: list[tuple[str, str]] = (),  # type: ignore[assignment]
    headers: dict[str, str] | None = None,
) -> WireExchange:
    """An OpenAI Chat Completions call: ``calls`` (id, name, arguments) in the reply."""
    messages: list[dict[str, Any]] = [{"role": "user", "content": question}]
    for call_id, content in tool_results:
        messages.append({"role": "tool", "tool_call_id": call_id, "content": content})
    message: dict[str, Any] = {"role": "assistant", "content": text or None}
    if calls:
        message["tool_calls"] = [
            {"id": cid, "type": "function", "function": {"name": name, "arguments": json.dumps(args)}}
            for cid, name, args in calls
        ]
    response = {
        "id": "chatcmpl-1",
        "object": "chat.completion",
        "model": "gpt-test",
        "choices": [{"index": 0, "message": message, "finish_reason": "tool_calls" if calls else "stop"}],
        "usage": {"prompt_tokens": 12, "completion_tokens": 7, "total_tokens": 19},
    }
    return WireExchange(
        channel="llm",
        label="POST /v1/chat/completions",
        started_at=timezone.now(),
        request_headers=headers or {"content-type": "application/json"},
        request_body=json.dumps({"model": "gpt-test", "messages": messages}),
        response_headers={"content-type": "application/json"},
        response_body=json.dumps(response),
        status="200",
        duration_ms=5.0,
    )


def mcp_pair(
    method: str, params: dict[str, Any], result: dict[str, Any], *, rpc_id: int = 1, server: str = "time"
) -> WireExchange:
    return WireExchange(
        channel="mcp",
        label=method,
        started_at=timezone.now(),
        jsonrpc_id=str(rpc_id),
        request_body=json.dumps({"jsonrpc": "2.0", "id": rpc_id, "method": method, "params": params}),
        response_body=json.dumps({"jsonrpc": "2.0", "id": rpc_id, "result": result}),
        status="ok",
        duration_ms=2.0,
        server_name=server,
    )


def tools_list(names: list[str], *, server: str = "time") -> WireExchange:
    tools = [{"name": name, "inputSchema": {"type": "object"}} for name in names]
    return mcp_pair("tools/list", {}, {"tools": tools}, rpc_id=2, server=server)


def tools_call(
    name: str, arguments: dict[str, Any], *, call_id: str | None = None, rpc_id: int = 3, text: str = "12:00"
) -> WireExchange:
    params: dict[str, Any] = {"name": name, "arguments": arguments}
    if call_id is not None:
        params["_meta"] = {"tool-call-inspector/call_id": call_id}
    return mcp_pair(
        "tools/call", params, {"content": [{"type": "text", "text": text}], "isError": False}, rpc_id=rpc_id
    )


def anthropic_call(
    *,
    question: str = "What time is it in Tokyo?",
    calls: list[tuple[str, str, dict[str, Any]]] = (),  # type: ignore[assignment]
) -> WireExchange:
    content: list[dict[str, Any]] = [
        {"type": "tool_use", "id": cid, "name": name, "input": args} for cid, name, args in calls
    ]
    if not calls:
        content = [{"type": "text", "text": "It is noon."}]
    response = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-test",
        "content": content,
        "stop_reason": "tool_use" if calls else "end_turn",
        "usage": {"input_tokens": 10, "output_tokens": 4},
    }
    return WireExchange(
        channel="llm",
        label="POST /v1/messages",
        started_at=timezone.now(),
        request_headers={"content-type": "application/json", "x-api-key": "sk-ant-api03-" + "k" * 40},
        request_body=json.dumps(
            {"model": "claude-test", "max_tokens": 100, "messages": [{"role": "user", "content": question}]}
        ),
        response_headers={"content-type": "application/json"},
        response_body=json.dumps(response),
        status="200",
        duration_ms=3.0,
    )


def chat_stream(*, question: str = "Say hi", text: str = "Hello there") -> WireExchange:
    """A streamed Chat Completions reply, the SSE text as received."""
    chunks = [
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"role": "assistant", "content": text[:5]}}],
        },
        {
            "id": "c",
            "object": "chat.completion.chunk",
            "choices": [{"index": 0, "delta": {"content": text[5:]}, "finish_reason": "stop"}],
        },
    ]
    body = "".join(f"data: {json.dumps(chunk)}\n\n" for chunk in chunks) + "data: [DONE]\n\n"
    return WireExchange(
        channel="llm",
        label="POST /v1/chat/completions",
        started_at=timezone.now(),
        request_body=json.dumps(
            {"model": "gpt-test", "stream": True, "messages": [{"role": "user", "content": question}]}
        ),
        response_headers={"content-type": "text/event-stream"},
        response_body=body,
        status="200",
        duration_ms=9.0,
    )
