"""A turn of one model reply that asked for thousands of tool calls, made straight in the
database: what a hostile reply leaves with the call limits raised (``AGENT_MAX_CALLS_PER_REPLY``),
an imported trace or an old record holds. Bench P14 measures its page; the page tests use it.

The rows are those the recorder writes for such a turn: a connect row, the decision (its parsed
calls, its raw model exchange), one tool step under it per call with its ``tools/call``
exchange, and the final answer, whose spliced prompt and request carry every result.
"""

from __future__ import annotations

import json
from datetime import timedelta

from django.db import transaction
from django.utils import timezone

from conversations.models import Conversation, Exchange, Step, Turn

QUESTION = "What will the weather be like in Paris tomorrow?"
ANSWER = "Sunny, 21 °C (and the model asked for far too many forecasts)."


def _call(index: int) -> dict[str, object]:
    return {
        "id": f"call_{index}",
        "name": "demo__weather",
        "server": "demo",
        "tool": "weather",
        "arguments": {"city": "Paris", "day": "tomorrow", "n": index},
        "valid": True,
    }


def huge_turn_build(*, conversation: Conversation, calls: int) -> Turn:
    """A finished turn of ``conversation`` whose model reply asked for ``calls`` tool calls, each
    run (a step and a ``tools/call`` exchange each), then answered."""
    now = timezone.now()
    seq = conversation.turns.count() + 1
    with transaction.atomic():
        turn = Turn.objects.create(
            conversation=conversation,
            seq=seq,
            question=QUESTION,
            status=Turn.Status.DONE,
            answer=ANSWER,
            paradigm="native",
            tool_choice="auto",
            model_name="bench-model",
            started_at=now,
            finished_at=now + timedelta(seconds=calls),
        )
        connect = Step(turn=turn, seq=1, kind=Step.Kind.CONNECT, status=Step.Status.OK, title="connect")
        parsed = [_call(index) for index in range(calls)]
        reply = {
            "choices": [
                {
                    "message": {
                        "role": "assistant",
                        "tool_calls": [
                            {
                                "id": call["id"],
                                "type": "function",
                                "function": {
                                    "name": call["name"],
                                    "arguments": json.dumps(call["arguments"]),
                                },
                            }
                            for call in parsed
                        ],
                    }
                }
            ]
        }
        decide = Step(
            turn=turn,
            seq=2,
            kind=Step.Kind.DECIDE,
            status=Step.Status.OK,
            title=f"calls {calls} × demo/weather",
            prompt=f"system: tools …\nuser: {QUESTION}\n",
            calls=parsed,
            started_at=now,
            finished_at=now + timedelta(milliseconds=300),
        )
        Step.objects.bulk_create([connect, decide])
        tools = [
            Step(
                turn=turn,
                parent=decide,
                seq=3 + index,
                kind=Step.Kind.TOOL,
                status=Step.Status.OK,
                title="demo/weather",
                tool_name="weather",
                server_name="demo",
                arguments=parsed[index]["arguments"],
                result={"content": [{"type": "text", "text": f"Forecast {index}: sunny, 21 °C"}]},
                started_at=now + timedelta(seconds=index),
                finished_at=now + timedelta(seconds=index, milliseconds=40),
                updated_at=now + timedelta(seconds=index, milliseconds=40),
            )
            for index in range(calls)
        ]
        Step.objects.bulk_create(tools, batch_size=2000)
        results = "\n".join(f"tool: Forecast {index}: sunny, 21 °C" for index in range(calls))
        answer = Step.objects.create(
            turn=turn,
            seq=3 + calls,
            kind=Step.Kind.ANSWER,
            status=Step.Status.OK,
            title="final answer",
            prompt=f"system: tools …\nuser: {QUESTION}\n{results}\n",
            text=ANSWER,
            started_at=now + timedelta(seconds=calls),
            finished_at=now + timedelta(seconds=calls, milliseconds=200),
            updated_at=now + timedelta(seconds=calls, milliseconds=200),
        )
        exchanges = [
            Exchange(
                turn=turn,
                step=decide,
                seq=1,
                channel=Exchange.Channel.LLM,
                label="POST /chat/completions",
                request_body=json.dumps(
                    {"model": "bench-model", "messages": [{"role": "user", "content": QUESTION}]}
                ),
                response_body=json.dumps(reply),
                status="200",
                started_at=now,
                duration_ms=300.0,
            ),
            *(
                Exchange(
                    turn=turn,
                    step=tool,
                    seq=2 + index,
                    channel=Exchange.Channel.MCP,
                    label="tools/call",
                    server_name="demo",
                    jsonrpc_id=str(index + 2),
                    request_body=json.dumps(
                        {
                            "jsonrpc": "2.0",
                            "id": index + 2,
                            "method": "tools/call",
                            "params": {"name": "weather", "arguments": tool.arguments},
                        }
                    ),
                    response_body=json.dumps({"jsonrpc": "2.0", "id": index + 2, "result": tool.result}),
                    status="ok",
                    started_at=tool.started_at,
                    duration_ms=40.0,
                )
                for index, tool in enumerate(tools)
            ),
            Exchange(
                turn=turn,
                step=answer,
                seq=2 + calls,
                channel=Exchange.Channel.LLM,
                label="POST /chat/completions",
                request_body=json.dumps(
                    {"model": "bench-model", "messages": [{"role": "tool", "content": results}]}
                ),
                response_body=json.dumps(
                    {"choices": [{"message": {"role": "assistant", "content": ANSWER}}]}
                ),
                status="200",
                started_at=answer.started_at,
                duration_ms=200.0,
            ),
        ]
        Exchange.objects.bulk_create(exchanges, batch_size=2000)
    return turn
