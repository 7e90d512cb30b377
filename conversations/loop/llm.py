"""The neutral vocabulary of the agent loop: messages, calls, tool definitions, tool choice.

Paradigms and providers translate between these and the wire; nothing here knows a wire format
or Django.
"""

from __future__ import annotations

import hashlib
import json
import re
from dataclasses import dataclass, field
from typing import Any, Literal

from conversations.typealias import JSONDict

Role = Literal["system", "user", "assistant", "tool"]
ChoiceMode = Literal["auto", "required", "named", "none"]


@dataclass
class ToolCall:
    """A call as the model expressed it. ``arguments`` is None when ``arguments_text`` isn't JSON."""

    id: str
    name: str
    arguments_text: str
    arguments: JSONDict | None = None

    def as_json(self) -> JSONDict:
        return {
            "id": self.id,
            "name": self.name,
            "arguments_text": self.arguments_text,
            "arguments": self.arguments,
        }

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolCall:
        return cls(data["id"], data["name"], data.get("arguments_text", ""), data.get("arguments"))


@dataclass
class Message:
    """One message of the neutral conversation."""

    role: Role
    content: str | None = None
    tool_calls: list[ToolCall] = field(default_factory=list)
    tool_call_id: str | None = None
    name: str | None = None
    is_error: bool = False
    # The paradigm whose text convention ``content`` already follows (replayed verbatim by it).
    format: str | None = None
    # What a provider must get back unchanged when this assistant message is replayed (thinking
    # blocks, thought signatures, reasoning_content), keyed by the provider's key.
    echo: JSONDict | None = None

    def as_json(self) -> JSONDict:
        data: JSONDict = {"role": self.role, "content": self.content}
        if self.format is not None:
            data["format"] = self.format
        if self.tool_calls:
            data["tool_calls"] = [call.as_json() for call in self.tool_calls]
        if self.tool_call_id is not None:
            data["tool_call_id"] = self.tool_call_id
        if self.name is not None:
            data["name"] = self.name
        if self.is_error:
            data["is_error"] = True
        if self.echo is not None:
            data["echo"] = self.echo
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Message:
        return cls(
            role=data["role"],
            content=data.get("content"),
            tool_calls=[ToolCall.from_json(c) for c in data.get("tool_calls", [])],
            tool_call_id=data.get("tool_call_id"),
            name=data.get("name"),
            is_error=bool(data.get("is_error", False)),
            format=data.get("format"),
            echo=data.get("echo"),
        )


@dataclass(frozen=True)
class ToolDef:
    """An MCP tool as offered to a model: where it lives, and the name the provider sees."""

    server_id: int
    server_name: str
    name: str
    provider_name: str
    description: str
    input_schema: JSONDict
    title: str = ""
    output_schema: JSONDict | None = None
    annotations: JSONDict | None = None
    # The tool's ``_meta`` as listed (e.g. the ``ui://`` resource of its MCP App); never sent
    # to a model.
    meta: JSONDict | None = None
    # Set when a host preset rewrote the definition (a turn run "as host", docs/hosts.md): the
    # preset's key, its verdict and every change from the server's definition. Never sent.
    host: JSONDict | None = None
    # The wire flags a host preset sends: OpenAI's ``strict`` (None: left out, the provider's
    # default) and the Gemini field the schema goes in ("" is ``parameters``).
    strict: bool | None = None
    schema_field: str = ""

    def as_json(self) -> JSONDict:
        data: JSONDict = {
            "server_id": self.server_id,
            "server": self.server_name,
            "name": self.name,
            "provider_name": self.provider_name,
            "title": self.title,
            "description": self.description,
            "inputSchema": self.input_schema,
            "outputSchema": self.output_schema,
            "annotations": self.annotations,
        }
        if self.meta:
            data["_meta"] = self.meta
        if self.host is not None:
            data["host"] = self.host
        if self.strict is not None:
            data["strict"] = self.strict
        if self.schema_field:
            data["schema_field"] = self.schema_field
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> ToolDef:
        return cls(
            server_id=data["server_id"],
            server_name=data["server"],
            name=data["name"],
            provider_name=data["provider_name"],
            description=data.get("description") or "",
            input_schema=data.get("inputSchema") or {"type": "object", "properties": {}},
            title=data.get("title") or "",
            output_schema=data.get("outputSchema"),
            annotations=data.get("annotations"),
            meta=data.get("_meta") if isinstance(data.get("_meta"), dict) else None,
            host=data.get("host") if isinstance(data.get("host"), dict) else None,
            strict=data.get("strict") if isinstance(data.get("strict"), bool) else None,
            schema_field=str(data.get("schema_field") or ""),
        )


@dataclass(frozen=True)
class ToolChoice:
    """auto / required / named / none; ``name`` is the provider name of the named tool."""

    mode: ChoiceMode = "auto"
    name: str | None = None

    def after_call(self) -> ToolChoice:
        """Forcing applies to the first decision only; afterwards the model may answer."""
        return ToolChoice("auto") if self.mode in {"required", "named"} else self


_NAME_UNSAFE = re.compile(r"[^A-Za-z0-9_-]")
PROVIDER_NAME_LIMIT = 64


def provider_tool_names(pairs: list[tuple[str, str]], limit: int = PROVIDER_NAME_LIMIT) -> list[str]:
    """Map (server, MCP tool name) pairs to names every provider accepts, unique and reversible.

    ``<server>__<tool>``, characters outside ``[A-Za-z0-9_-]`` replaced by ``_``, cut to
    ``limit``; collisions (after sanitising or cutting) get a short stable hash suffix.
    """
    names: list[str] = []
    seen: set[str] = set()
    for server, tool in pairs:
        base = _NAME_UNSAFE.sub("_", f"{server}__{tool}")
        candidate = base[:limit]
        if candidate in seen or len(base) > limit:
            digest = hashlib.sha256(f"{server}\x00{tool}".encode()).hexdigest()[:8]
            candidate = f"{base[: limit - 9]}_{digest}"
        counter = 2
        while candidate in seen:
            candidate = f"{base[: limit - 12]}_{digest}{counter}"
            counter += 1
        seen.add(candidate)
        names.append(candidate)
    return names


def tool_result_text(result: JSONDict | None) -> str:
    """The text a model is given for an MCP ``tools/call`` result.

    Text blocks verbatim; structured content as JSON when there is no text; other blocks as a
    short bracketed note (a model reading text cannot see an image).
    """
    if not result:
        return ""
    parts: list[str] = []
    content = result.get("content")
    for block in content if isinstance(content, list) else []:
        if not isinstance(block, dict):
            continue
        kind = block.get("type")
        if kind == "text":
            parts.append(str(block.get("text", "")))
        elif kind == "resource_link":
            parts.append(f"[resource link: {block.get('uri', '')}]")
        elif kind == "resource":
            resource = block.get("resource")
            if isinstance(resource, dict) and "text" in resource:
                parts.append(str(resource["text"]))
            else:
                parts.append("[embedded resource]")
        else:
            parts.append(f"[{kind} content: {block.get('mimeType', 'unknown type')}]")
    if not parts and result.get("structuredContent") is not None:
        parts.append(json.dumps(result["structuredContent"], ensure_ascii=False))
    return "\n".join(parts)
