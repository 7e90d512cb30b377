"""The floor P1 is measured against: a bare agent loop that records nothing.

The openai SDK asks the model, the mcp SDK calls the tool over stdio; no database, no capture,
no publishing, no prompt splicing, no validation. Like the product it keeps one MCP session open
across turns and lists the tools at the start of each turn. It runs in its own process (no Django
imported) and answers one line per command on stdin: ``turn`` runs one turn and prints
``{"seconds": ..., "model_calls": ..., "tool_calls": ...}``; ``concurrent N`` runs N turns at once
on the same MCP session (the async openai client, one task per turn: P4's floor) and prints
``{"seconds": ..., "turns": N, "model_calls": ..., "tool_calls": ...}``.

    python -m bench.bare_loop BASE_URL MODEL
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Awaitable, Callable
from pathlib import Path
from typing import Any

import anyio
from mcp import Client, StdioServerParameters, stdio_client
from openai import AsyncOpenAI, OpenAI

REPO_ROOT = Path(__file__).resolve().parent.parent
QUESTION = "Work out the running totals with the calculator, one call at a time."


# One chat.completions.create call: the blocking client's (one turn at a time) or the async one's.
Ask = Callable[..., Awaitable[Any]]


async def run_turn(mcp: Client, ask: Ask, model: str, question: str, max_calls: int = 64) -> tuple[int, int]:
    """One turn to a final answer; returns (model calls, tool calls)."""
    listed = await mcp.list_tools()
    tools = [
        {
            "type": "function",
            "function": {"name": t.name, "description": t.description or "", "parameters": t.input_schema},
        }
        for t in listed.tools
    ]
    messages: list[dict[str, object]] = [{"role": "user", "content": question}]
    tool_calls = 0
    for calls in range(1, max_calls + 1):
        reply = await ask(model=model, messages=messages, tools=tools, tool_choice="auto")
        message = reply.choices[0].message
        if not message.tool_calls:
            return calls, tool_calls
        messages.append(message.model_dump(exclude_none=True))
        for call in message.tool_calls:
            result = await mcp.call_tool(call.function.name, json.loads(call.function.arguments or "{}"))
            text = "\n".join(c.text for c in result.content if c.type == "text")
            messages.append({"role": "tool", "tool_call_id": call.id, "content": text})
            tool_calls += 1
    raise RuntimeError(f"no answer after {max_calls} model calls")


async def run_concurrently(mcp: Client, ask: Ask, model: str, count: int) -> dict[str, Any]:
    """``count`` turns at once; their wall time and the calls they made."""
    totals = [0, 0]

    async def one() -> None:
        calls, tools = await run_turn(mcp, ask, model, QUESTION)
        totals[0] += calls
        totals[1] += tools

    started = time.perf_counter()
    async with anyio.create_task_group() as group:
        for _ in range(count):
            group.start_soon(one)
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "turns": count, "model_calls": totals[0], "tool_calls": totals[1]}


async def serve(base_url: str, model: str) -> None:
    llm = OpenAI(base_url=base_url, api_key="bench", max_retries=0)
    # Enough connections for every turn of a concurrent run to wait on the model at once.
    many = AsyncOpenAI(base_url=base_url, api_key="bench", max_retries=0, timeout=120)

    async def ask_blocking(**request: Any) -> Any:
        return llm.chat.completions.create(**request)

    server = StdioServerParameters(
        command=sys.executable, args=["-m", "servers.demo_server"], cwd=str(REPO_ROOT)
    )
    with open("/dev/null", "w") as errlog:
        async with Client(stdio_client(server, errlog=errlog), mode="legacy") as mcp:
            print(json.dumps({"ready": True}), flush=True)
            while command := (await anyio.to_thread.run_sync(sys.stdin.readline)).split():
                if command == ["turn"]:
                    started = time.perf_counter()
                    calls, tools = await run_turn(mcp, ask_blocking, model, QUESTION)
                    seconds = time.perf_counter() - started
                    print(
                        json.dumps({"seconds": seconds, "model_calls": calls, "tool_calls": tools}),
                        flush=True,
                    )
                elif command[0] == "concurrent" and len(command) == 2:
                    reply = await run_concurrently(mcp, many.chat.completions.create, model, int(command[1]))
                    print(json.dumps(reply), flush=True)
                else:
                    break


if __name__ == "__main__":
    anyio.run(serve, sys.argv[1], sys.argv[2])
