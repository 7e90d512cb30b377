"""Spans of other instrumentations in the GenAI conventions' terms, before ``otel_import`` maps them.

OpenLLMetry (``llm.request.type``, ``gen_ai.prompt.N.*``, ``gen_ai.completion.N.*``,
``traceloop.span.kind``) and OpenInference (``openinference.span.kind``, ``llm.input_messages.N.*``,
``llm.output_messages.N.*``, ``llm.tools.N.tool.json_schema``, ``tool.*``,
``input.value``/``output.value``) each flatten the same
facts into attributes of their own. ``genai_attributes`` returns the GenAI attributes those stand
for (``gen_ai.operation.name``, ``gen_ai.input.messages``, ``gen_ai.tool.call.result`` ...) and the
names it read, so the import maps them like any GenAI span and lists only the rest as unmapped.
A span none of them describes gets nothing. See docs/traces.md.
"""

from __future__ import annotations

import json

from conversations.typealias import JSONDict, JSONValue


def _json(value: JSONValue) -> JSONValue:
    if isinstance(value, str):
        try:
            return json.loads(value)  # type: ignore[no-any-return]
        except (ValueError, RecursionError):
            return value
    return value


def _indexed(attrs: dict[str, JSONValue], prefix: str) -> list[dict[str, JSONValue]]:
    """``prefix.N.rest = v`` attributes as one mapping of ``rest`` a position, in order of N."""
    found: dict[int, dict[str, JSONValue]] = {}
    for key, value in attrs.items():
        if key.startswith(prefix):
            index, _, rest = key[len(prefix) :].partition(".")
            if index.isdigit() and rest:
                found.setdefault(int(index), {})[rest] = value
    return [found[n] for n in sorted(found)]


def _messages(attrs: dict[str, JSONValue], prefix: str, default_role: str) -> list[JSONDict]:
    """Flattened messages (either instrumentation's spelling) as GenAI messages with parts."""
    messages: list[JSONDict] = []
    for raw in _indexed(attrs, prefix):
        fields = {key.removeprefix("message."): value for key, value in raw.items()}
        role = str(fields.get("role") or default_role)
        parts: list[JSONValue] = []
        content = fields.get("content")
        call_id = fields.get("tool_call_id")
        if content not in (None, "") and role == "tool":
            parts.append({"type": "tool_call_response", "id": call_id, "response": _json(content)})
        elif content not in (None, ""):
            parts.append({"type": "text", "content": str(content)})
        for call in _indexed(fields, "tool_calls."):
            call = {key.removeprefix("tool_call.").removeprefix("function."): v for key, v in call.items()}
            parts.append(
                {
                    "type": "tool_call",
                    "id": call.get("id"),
                    "name": call.get("name"),
                    "arguments": _json(call.get("arguments")),
                }
            )
        messages.append({"role": role, "parts": parts})
    return messages


def _first(attrs: dict[str, JSONValue], *names: str) -> tuple[JSONValue, str | None]:
    for name in names:
        if attrs.get(name) not in (None, ""):
            return attrs[name], name
    return None, None


def _model(attrs: dict[str, JSONValue], prompt: str, completion: str, read: set[str]) -> JSONDict:
    read.update(k for k in attrs if k.startswith((prompt, completion)))
    mapped: JSONDict = {
        "gen_ai.input.messages": json.dumps(_messages(attrs, prompt, "user"), ensure_ascii=False),
        "gen_ai.output.messages": json.dumps(_messages(attrs, completion, "assistant"), ensure_ascii=False),
    }
    tools = [_json(raw.get("tool.json_schema")) for raw in _indexed(attrs, "llm.tools.")]
    if tools:  # OpenInference: llm.tools.N.tool.json_schema, each one request's tool as JSON
        read.update(k for k in attrs if k.startswith("llm.tools."))
        mapped["gen_ai.tool.definitions"] = json.dumps(tools, ensure_ascii=False)
    for target, names in (
        ("gen_ai.request.model", ("gen_ai.request.model", "llm.model_name", "gen_ai.response.model")),
        ("gen_ai.system", ("gen_ai.system", "llm.provider", "llm.system")),
        (
            "gen_ai.usage.input_tokens",
            ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt"),
        ),
        (
            "gen_ai.usage.output_tokens",
            ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion"),
        ),
    ):
        value, name = _first(attrs, *names)
        if name is not None:
            mapped[target] = str(value).lower() if target == "gen_ai.system" else value
            read.add(name)
    return mapped


def genai_attributes(attrs: dict[str, JSONValue]) -> tuple[JSONDict, set[str]]:
    """The GenAI attributes a foreign span stands for, and the attribute names that were read."""
    read: set[str] = set()
    if "gen_ai.operation.name" in attrs:
        return {}, read
    openinference = str(attrs.get("openinference.span.kind") or "").upper()
    traceloop = str(attrs.get("traceloop.span.kind") or "").lower()
    request_type = str(attrs.get("llm.request.type") or "")
    if openinference == "LLM":
        read.add("openinference.span.kind")
        mapped = _model(attrs, "llm.input_messages.", "llm.output_messages.", read)
        return {"gen_ai.operation.name": "chat", **mapped}, read
    if request_type in ("chat", "completion") or any(k.startswith("gen_ai.completion.") for k in attrs):
        read.add("llm.request.type")
        mapped = _model(attrs, "gen_ai.prompt.", "gen_ai.completion.", read)
        operation = "text_completion" if request_type == "completion" else "chat"
        return {"gen_ai.operation.name": operation, **mapped}, read
    if openinference == "TOOL" or traceloop == "tool":
        read.update(("openinference.span.kind", "traceloop.span.kind"))
        name, name_key = _first(attrs, "tool.name", "traceloop.entity.name")
        arguments, arguments_key = _first(attrs, "tool.parameters", "input.value", "traceloop.entity.input")
        if arguments_key == "tool.parameters":  # OpenInference: the schema; the call's input is input.value
            arguments, arguments_key = _first(attrs, "input.value", "traceloop.entity.input")
        result, result_key = _first(attrs, "output.value", "traceloop.entity.output")
        call_id, call_key = _first(attrs, "tool_call.id", "tool.id")
        read.update(k for k in (name_key, arguments_key, result_key, call_key) if k)
        mapped = {"gen_ai.operation.name": "execute_tool", "gen_ai.tool.name": name}
        if arguments_key:
            mapped["gen_ai.tool.call.arguments"] = arguments
        if result_key:
            mapped["gen_ai.tool.call.result"] = result
        if call_key:
            mapped["gen_ai.tool.call.id"] = call_id
        return {k: v for k, v in mapped.items() if v is not None}, read
    return {}, read
