"""Teaching mode's vocabulary: a one-line note (and, where it matters, a public spec link) for every
field of the payloads the pages show, the roles of the parties on each row, and what each layer
of a step is. docs/teaching.md explains the choices.

The notes are keyed by the format a body speaks (:data:`FORMATS`): the same name can mean
different things in two formats (``input`` is the conversation in OpenAI Responses and a tool's
arguments in Anthropic Messages), so each format has its own table over a shared one. The values
of some fields are the tool's or the user's own data (a tool's arguments, a JSON Schema): their
inner names belong to no protocol, so they are not walked (:data:`OPAQUE`).

Pure Python: no Django, so the table can be read and tested on its own.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import cast
from urllib.parse import parse_qsl

from conversations.typealias import JSONValue

# Public references the notes link to.
OPENAI_CHAT = "https://platform.openai.com/docs/api-reference/chat/create"
OPENAI_CHAT_STREAM = "https://platform.openai.com/docs/api-reference/chat-streaming"
OPENAI_FUNCTIONS = "https://platform.openai.com/docs/guides/function-calling"
OPENAI_STRUCTURED = "https://platform.openai.com/docs/guides/structured-outputs"
OPENAI_RESPONSES = "https://platform.openai.com/docs/api-reference/responses/create"
OPENAI_RESPONSES_STREAM = "https://platform.openai.com/docs/api-reference/responses-streaming"
ANTHROPIC = "https://docs.anthropic.com/en/api/messages"
ANTHROPIC_TOOLS = "https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use"
ANTHROPIC_STREAM = "https://docs.anthropic.com/en/docs/build-with-claude/streaming"
GEMINI = "https://ai.google.dev/api/generate-content"
GEMINI_FUNCTIONS = "https://ai.google.dev/gemini-api/docs/function-calling"
GEMINI_STRUCTURED = "https://ai.google.dev/gemini-api/docs/structured-output"
JSONRPC = "https://www.jsonrpc.org/specification"
MCP = "https://modelcontextprotocol.io/specification/2025-11-25"
MCP_LIFECYCLE = f"{MCP}/basic/lifecycle"
MCP_TOOLS = f"{MCP}/server/tools"
MCP_RESOURCES = f"{MCP}/server/resources"
MCP_PROMPTS = f"{MCP}/server/prompts"
MCP_COMPLETION = f"{MCP}/server/utilities/completion"
MCP_LOGGING = f"{MCP}/server/utilities/logging"
MCP_PROGRESS = f"{MCP}/basic/utilities/progress"
MCP_SAMPLING = f"{MCP}/client/sampling"
MCP_ELICITATION = f"{MCP}/client/elicitation"
MCP_ROOTS = f"{MCP}/client/roots"
MCP_TASKS = f"{MCP}/basic/utilities/tasks"
MCP_AUTHORIZATION = f"{MCP}/basic/authorization"
# The stateless era: multi round-trip requests (input_required) are among its changes.
MCP_2026 = "https://modelcontextprotocol.io/specification/2026-07-28"
MCP_2026_CHANGES = f"{MCP_2026}/changelog"
MCP_APPS = "https://github.com/modelcontextprotocol/ext-apps"
JSON_SCHEMA = "https://json-schema.org/understanding-json-schema/reference"
RFC_6749 = "https://www.rfc-editor.org/rfc/rfc6749"
RFC_7591 = "https://www.rfc-editor.org/rfc/rfc7591"
RFC_7636 = "https://www.rfc-editor.org/rfc/rfc7636"
RFC_8414 = "https://www.rfc-editor.org/rfc/rfc8414"
RFC_8707 = "https://www.rfc-editor.org/rfc/rfc8707"
RFC_9728 = "https://www.rfc-editor.org/rfc/rfc9728"
OIDC_DISCOVERY = "https://openid.net/specs/openid-connect-discovery-1_0.html"
CLIENT_METADATA_DOCUMENT = "https://datatracker.ietf.org/doc/draft-ietf-oauth-client-id-metadata-document/"

FORMATS = ("openai_chat", "openai_responses", "anthropic", "gemini", "mcp", "oauth")
# The label prefix of an OAuth flow's HTTP records (``servers.gateway.oauth.RECORD_LABEL_PREFIX``).
OAUTH_LABEL = "oauth:"


@dataclass(frozen=True)
class Note:
    """One field's explanation: one line, and the spec section that defines it (may be empty)."""

    text: str
    spec: str = ""


@dataclass(frozen=True)
class FieldNote:
    name: str
    note: Note | None


def _n(text: str, spec: str = "") -> Note:
    return Note(text, spec)


# Names every model API shares the meaning of (a format's own table wins over these).
_MODEL_COMMON: dict[str, Note] = {
    "model": _n("Which model the request is for (the name the provider knows it by)."),
    "stream": _n("Ask for the reply as a stream of server-sent events instead of one body."),
    "temperature": _n("Sampling randomness: 0 is the most deterministic."),
    "max_tokens": _n("The most tokens the model may write in its reply."),
    "role": _n("Who speaks in this message: the user, the assistant (the model), or the system."),
    "content": _n("What the message says: text, or a list of typed blocks."),
    "text": _n("Plain text written by the user or the model."),
    "type": _n("The kind of this object or block; the other fields depend on it."),
    "name": _n("A name: of a tool (function), or of the speaker."),
    "description": _n("The tool's description: prompt text the model reads to decide when to use it."),
    "id": _n("The provider's id of this reply (or of one tool call in it)."),
    "index": _n("The position of this item in a list the stream builds piece by piece."),
    "object": _n("What kind of object the provider returns (e.g. chat.completion)."),
    "created": _n("When the provider created the reply (Unix seconds)."),
    "usage": _n("Tokens the provider counted for this call: what it read and what it wrote."),
    "strict": _n(
        "Ask the provider to keep the call's arguments exactly to the schema (constrained decoding).",
        OPENAI_STRUCTURED,
    ),
    "error": _n("Why the provider refused or failed the request."),
    "message": _n("A human-readable explanation (of an error, or the reply message)."),
    "code": _n("A machine-readable error code."),
    "param": _n("The request field the error is about."),
    "status": _n("The state of this reply or item (e.g. completed, in_progress)."),
}

_OPENAI_CHAT: dict[str, Note] = {
    "messages": _n("The whole conversation so far, oldest first: the model sees only this.", OPENAI_CHAT),
    "tools": _n(
        "The tools offered to the model as JSON Schema: the model can only *select* one; the host executes it.",
        OPENAI_FUNCTIONS,
    ),
    "tool_choice": _n(
        "Whether the model may (auto), must (required), must call this one (named) or must not (none) call a tool.",
        OPENAI_FUNCTIONS,
    ),
    "function": _n(
        "A function tool: its name, description and parameters (or, in a call, name and arguments)."
    ),
    "parameters": _n(
        "The JSON Schema of the tool's arguments (copied from the MCP tool's inputSchema).", JSON_SCHEMA
    ),
    "arguments": _n(
        "The arguments the model chose, as a JSON *string*: it may be invalid JSON, so the host parses it.",
        OPENAI_FUNCTIONS,
    ),
    "tool_calls": _n(
        "The model *selects* tools here (name + arguments); nothing has run yet — the host executes them.",
        OPENAI_FUNCTIONS,
    ),
    "tool_call_id": _n(
        "Which tool call this tool message answers (the id from tool_calls).", OPENAI_FUNCTIONS
    ),
    "choices": _n("The model's candidate replies; the host reads the first.", OPENAI_CHAT),
    "finish_reason": _n(
        "Why the model stopped: stop (a final answer), tool_calls (it selected tools), length (cut off).",
        OPENAI_CHAT,
    ),
    "delta": _n("In a stream: the piece of the message this event adds.", OPENAI_CHAT_STREAM),
    "refusal": _n("Text the model wrote instead when it refuses to answer."),
    "response_format": _n(
        "Constrain the reply's shape: json_schema makes the model answer with JSON matching the schema.",
        OPENAI_STRUCTURED,
    ),
    "json_schema": _n("The named schema the structured reply must match.", OPENAI_STRUCTURED),
    "schema": _n("The JSON Schema itself.", JSON_SCHEMA),
    "stream_options": _n("Options for streaming, e.g. include_usage (the last event carries the usage)."),
    "include_usage": _n("Send the token usage as a last stream event.", OPENAI_CHAT_STREAM),
    "prompt_tokens": _n("Tokens the model read: the whole conversation and the tool definitions."),
    "completion_tokens": _n("Tokens the model wrote."),
    "total_tokens": _n("Read plus written tokens."),
    "logprobs": _n("Token probabilities, when asked for (null here)."),
    "system_fingerprint": _n("The provider's backend configuration that produced the reply."),
    "parallel_tool_calls": _n("Whether the model may select several tools in one reply."),
    "annotations": _n("Citations or other notes attached to the message (empty here)."),
    "service_tier": _n("Which processing tier served the request."),
}

_OPENAI_RESPONSES: dict[str, Note] = {
    "input": _n(
        "The conversation as a list of items (messages, function calls and their outputs).", OPENAI_RESPONSES
    ),
    "instructions": _n("The system prompt: instructions the model reads before the input.", OPENAI_RESPONSES),
    "tools": _n(
        "The tools offered to the model (name, description, parameters flat in each item): the model only selects.",
        OPENAI_FUNCTIONS,
    ),
    "tool_choice": _n(
        "Whether the model may (auto), must (required), must call this one (named) or must not (none) call a tool.",
        OPENAI_FUNCTIONS,
    ),
    "parameters": _n(
        "The JSON Schema of the tool's arguments (copied from the MCP tool's inputSchema).", JSON_SCHEMA
    ),
    "arguments": _n("The arguments the model chose, as a JSON string the host must parse.", OPENAI_FUNCTIONS),
    "call_id": _n(
        "Ties a function_call to its function_call_output: the host sends the result back under this id.",
        OPENAI_FUNCTIONS,
    ),
    "output": _n("The reply's items: messages and function_call items (the model's selections)."),
    "output_text": _n("An output text block (the model's words)."),
    "output_tokens": _n("Tokens the model wrote."),
    "input_tokens": _n("Tokens the model read: instructions, input and tool definitions."),
    "total_tokens": _n("Read plus written tokens."),
    "text": _n("Text, or (at the top of a request) how the text reply must be formatted.", OPENAI_RESPONSES),
    "format": _n("The reply's format: json_schema constrains it to a schema.", OPENAI_STRUCTURED),
    "schema": _n("The JSON Schema itself.", JSON_SCHEMA),
    "response": _n(
        "In a stream event: the response object as it stands at that event.", OPENAI_RESPONSES_STREAM
    ),
    "item": _n("In a stream event: the output item being added or finished.", OPENAI_RESPONSES_STREAM),
    "item_id": _n("Which output item a stream event belongs to.", OPENAI_RESPONSES_STREAM),
    "output_index": _n("The position of the output item a stream event belongs to.", OPENAI_RESPONSES_STREAM),
    "content_index": _n(
        "The position of the content part a stream event belongs to.", OPENAI_RESPONSES_STREAM
    ),
    "part": _n("In a stream event: the content part being added or finished.", OPENAI_RESPONSES_STREAM),
    "delta": _n(
        "In a stream event: the piece of text or arguments this event adds.", OPENAI_RESPONSES_STREAM
    ),
    "sequence_number": _n("The order of this event in the stream.", OPENAI_RESPONSES_STREAM),
    "created_at": _n("When the provider created the response (Unix seconds)."),
    "annotations": _n("Citations or other notes attached to the text (empty here)."),
    "parallel_tool_calls": _n("Whether the model may select several tools in one reply."),
    "store": _n("Whether the provider keeps the response for later reference."),
    "incomplete_details": _n(
        "Why the response stopped early (e.g. max_output_tokens), or null.", OPENAI_RESPONSES
    ),
}

_ANTHROPIC: dict[str, Note] = {
    "system": _n("The system prompt, separate from the messages in this format.", ANTHROPIC),
    "messages": _n("The conversation so far: user and assistant turns, alternating.", ANTHROPIC),
    "tools": _n(
        "The tools offered to the model (name, description, input_schema): the model can only select one.",
        ANTHROPIC_TOOLS,
    ),
    "tool_choice": _n(
        "auto (may call), any (must call), tool (must call this one) or none (must not).", ANTHROPIC_TOOLS
    ),
    "input_schema": _n(
        "The JSON Schema of the tool's input (copied from the MCP tool's inputSchema).", JSON_SCHEMA
    ),
    "input": _n(
        "In a tool_use block: the arguments the model chose, already a JSON object.", ANTHROPIC_TOOLS
    ),
    "tool_use_id": _n("Which tool_use block this tool_result answers.", ANTHROPIC_TOOLS),
    "is_error": _n("Marks a tool_result as a failure, so the model can repair its call.", ANTHROPIC_TOOLS),
    "stop_reason": _n(
        "Why the model stopped: end_turn (final answer), tool_use (it selected a tool), max_tokens (cut off).",
        ANTHROPIC,
    ),
    "stop_sequence": _n("The stop sequence that ended the reply, if one did."),
    "input_tokens": _n("Tokens the model read: system prompt, messages and tool definitions."),
    "output_tokens": _n("Tokens the model wrote."),
    "cache_creation_input_tokens": _n("Input tokens written to the prompt cache."),
    "cache_read_input_tokens": _n("Input tokens read from the prompt cache."),
    "disable_parallel_tool_use": _n(
        "If true, the model selects at most one tool per reply.", ANTHROPIC_TOOLS
    ),
    "output_config": _n(
        "Output settings: format json_schema constrains the reply (structured outputs).", ANTHROPIC
    ),
    "format": _n("The reply's format: json_schema with its schema.", ANTHROPIC),
    "schema": _n("The JSON Schema itself.", JSON_SCHEMA),
    "delta": _n(
        "In a stream: the piece this event adds (text, or partial_json of a tool's input).", ANTHROPIC_STREAM
    ),
    "partial_json": _n(
        "A piece of the tool input's JSON text, streamed; whole only at content_block_stop.", ANTHROPIC_STREAM
    ),
    "content_block": _n("In a stream: the block that starts here (text or tool_use).", ANTHROPIC_STREAM),
    "index": _n("Which content block a stream event belongs to.", ANTHROPIC_STREAM),
}

_GEMINI: dict[str, Note] = {
    "contents": _n(
        "The conversation so far: a list of turns (role user or model), each made of parts.", GEMINI
    ),
    "parts": _n("The pieces of a turn: text, a functionCall or a functionResponse.", GEMINI),
    "systemInstruction": _n("The system prompt, separate from the contents.", GEMINI),
    "system_instruction": _n("The system prompt, separate from the contents.", GEMINI),
    "tools": _n("The tools offered to the model: its function declarations.", GEMINI_FUNCTIONS),
    "functionDeclarations": _n(
        "The functions the model may select (name, description, parameters).", GEMINI_FUNCTIONS
    ),
    "function_declarations": _n(
        "The functions the model may select (name, description, parameters).", GEMINI_FUNCTIONS
    ),
    "parameters": _n(
        "The schema of the function's arguments (an OpenAPI subset of JSON Schema).", GEMINI_FUNCTIONS
    ),
    "parametersJsonSchema": _n("The function's arguments as a full JSON Schema.", GEMINI_FUNCTIONS),
    "toolConfig": _n("How the model may use the tools (the tool_choice of this format).", GEMINI_FUNCTIONS),
    "tool_config": _n("How the model may use the tools (the tool_choice of this format).", GEMINI_FUNCTIONS),
    "functionCallingConfig": _n("The calling mode and, optionally, the functions allowed.", GEMINI_FUNCTIONS),
    "function_calling_config": _n(
        "The calling mode and, optionally, the functions allowed.", GEMINI_FUNCTIONS
    ),
    "mode": _n(
        "AUTO (may call), ANY (must call), NONE (must not) — the tool_choice of this format.",
        GEMINI_FUNCTIONS,
    ),
    "allowedFunctionNames": _n(
        "With mode ANY: the only functions the model may select (a named choice).", GEMINI_FUNCTIONS
    ),
    "allowed_function_names": _n(
        "With mode ANY: the only functions the model may select (a named choice).", GEMINI_FUNCTIONS
    ),
    "functionCall": _n(
        "The model *selects* a function here (name + args); the host executes it.", GEMINI_FUNCTIONS
    ),
    "args": _n("The arguments the model chose, as a JSON object.", GEMINI_FUNCTIONS),
    "functionResponse": _n(
        "The host sends the tool's result back to the model in this part.", GEMINI_FUNCTIONS
    ),
    "response": _n("The function's result, as a JSON object.", GEMINI_FUNCTIONS),
    "generationConfig": _n("Sampling and output settings (temperature, response schema…).", GEMINI),
    "generation_config": _n("Sampling and output settings (temperature, response schema…).", GEMINI),
    "responseMimeType": _n("application/json asks for a JSON reply.", GEMINI_STRUCTURED),
    "responseSchema": _n("The schema the JSON reply must match.", GEMINI_STRUCTURED),
    "responseJsonSchema": _n("The JSON Schema the reply must match.", GEMINI_STRUCTURED),
    "maxOutputTokens": _n("The most tokens the model may write."),
    "candidates": _n("The model's candidate replies; the host reads the first.", GEMINI),
    "finishReason": _n(
        "Why the model stopped: STOP (normal end, also after a function call), MAX_TOKENS…", GEMINI
    ),
    "usageMetadata": _n("Tokens counted for this call.", GEMINI),
    "promptTokenCount": _n("Tokens the model read: contents, system instruction and function declarations."),
    "candidatesTokenCount": _n("Tokens the model wrote."),
    "totalTokenCount": _n("Read plus written tokens."),
    "modelVersion": _n("The model version that answered."),
    "responseId": _n("The provider's id of this reply."),
    "id": _n("An id of this function call (sent back with its functionResponse)."),
    "thoughtSignature": _n("An opaque token the host must send back unchanged with the call's turn."),
}

_MCP: dict[str, Note] = {
    "jsonrpc": _n('Always "2.0": this message is JSON-RPC 2.0, the envelope MCP uses.', JSONRPC),
    "id": _n("Pairs a request with its response; a notification has none (no answer expected).", JSONRPC),
    "method": _n("What is asked: initialize, tools/list, tools/call (the host *executes* a tool)…", MCP),
    "params": _n("The request's arguments.", JSONRPC),
    "result": _n("A successful response's payload.", JSONRPC),
    "error": _n(
        "A failed request: a protocol error (unknown tool, bad params), not a tool's own failure.", JSONRPC
    ),
    "code": _n("The JSON-RPC error code (e.g. -32602 invalid params).", JSONRPC),
    "message": _n(
        "Human-readable text: an error's explanation, or the question an elicitation puts to the user; "
        "in MCP Apps' hostCapabilities, that the app may send the model messages (ui/message)."
    ),
    "data": _n(
        "Extra detail about an error, or a log message's payload (any JSON) in notifications/message."
    ),
    "protocolVersion": _n("The MCP revision the client asks for and the server agrees to.", MCP_LIFECYCLE),
    "capabilities": _n(
        "The optional features each side supports (tools, resources, sampling…).", MCP_LIFECYCLE
    ),
    "clientInfo": _n("The client's name and version.", MCP_LIFECYCLE),
    "serverInfo": _n("The server's name and version.", MCP_LIFECYCLE),
    "instructions": _n(
        "Hints from the server on how to use it (a host may show them to the model).", MCP_LIFECYCLE
    ),
    "name": _n("A name: of the tool, prompt, argument or implementation."),
    "title": _n("A human-readable display name."),
    "version": _n("The implementation's version."),
    "description": _n("Prompt text the model reads (for a tool: when to use it)."),
    "websiteUrl": _n("The implementation's web site."),
    "icons": _n("Icons a UI may show for this item."),
    "listChanged": _n("The side will send a notification when this list changes.", MCP_LIFECYCLE),
    "subscribe": _n("The server supports subscribing to a resource's changes.", MCP_RESOURCES),
    "tools": _n(
        "The server's tools (in a result), or that the server offers tools (in capabilities).", MCP_TOOLS
    ),
    "resources": _n("Data the server exposes by URI (in a result), or the capability.", MCP_RESOURCES),
    "resourceTemplates": _n("URI templates for resources with parameters.", MCP_RESOURCES),
    "prompts": _n("Prompt templates the server offers (in a result), or the capability.", MCP_PROMPTS),
    "completions": _n("The server can suggest values for arguments.", MCP_COMPLETION),
    "logging": _n("The server can send log messages.", MCP_LOGGING),
    "sampling": _n("The client can ask its model on the server's behalf.", MCP_SAMPLING),
    "elicitation": _n("The client can ask its user for input on the server's behalf.", MCP_ELICITATION),
    "roots": _n(
        "The folders (file:// URIs) the client lets the server work in (in a result), or the capability.",
        MCP_ROOTS,
    ),
    "experimental": _n("Non-standard capabilities."),
    "extensions": _n("Optional extensions of MCP this side supports, by identifier, with their settings."),
    "io.modelcontextprotocol/ui": _n(
        "MCP Apps: the client can render a tool's HTML user interface (a ui:// resource).", MCP_APPS
    ),
    "mimeTypes": _n("The content types of app interfaces the client can render.", MCP_APPS),
    "tasks": _n("Long-running requests this side can run as tasks (fetched later).", MCP_TASKS),
    "requests": _n("Tasks: which requests may be run as tasks.", MCP_TASKS),
    "call": _n("Tasks: tools/call may be run as a task.", MCP_TASKS),
    "list": _n("Tasks: this side lists its tasks (tasks/list).", MCP_TASKS),
    "cancel": _n("Tasks: this side cancels a task on request (tasks/cancel).", MCP_TASKS),
    "inputSchema": _n(
        "The JSON Schema of the tool's arguments: the host copies it into the model request.", MCP_TOOLS
    ),
    "outputSchema": _n("The JSON Schema of the tool's structuredContent.", MCP_TOOLS),
    "annotations": _n(
        "Hints about the tool or content (read-only, destructive, audience…); not guarantees.", MCP_TOOLS
    ),
    "readOnlyHint": _n("Hint: the tool does not change its environment.", MCP_TOOLS),
    "destructiveHint": _n("Hint: the tool may change things irreversibly.", MCP_TOOLS),
    "idempotentHint": _n("Hint: calling twice has the same effect as once.", MCP_TOOLS),
    "openWorldHint": _n("Hint: the tool reaches the world outside (the web, other systems).", MCP_TOOLS),
    "arguments": _n(
        "In tools/call: the arguments the model chose, sent by the host's client to the server.", MCP_TOOLS
    ),
    "content": _n(
        "What is carried: a tool's result or a message as content blocks (text, image, resource…); in "
        "an elicitation's answer, the values the user gave.",
        MCP_TOOLS,
    ),
    "structuredContent": _n("The tool's result as a JSON object matching its outputSchema.", MCP_TOOLS),
    "isError": _n(
        "true: the tool ran and failed (its error goes back to the model to repair); not a protocol error.",
        MCP_TOOLS,
    ),
    "type": _n("The kind of content block (text, image, audio, resource, resource_link)."),
    "text": _n("Text content."),
    "mimeType": _n("The media type of the content."),
    "uri": _n(
        "An address: of a resource (to read, to subscribe to, or that changed), or of a root folder.",
        MCP_RESOURCES,
    ),
    "uriTemplate": _n("A URI with {placeholders} for the resource's parameters.", MCP_RESOURCES),
    "contents": _n("What resources/read returned: the resource's text or data.", MCP_RESOURCES),
    "blob": _n("Binary content, base64-encoded."),
    "size": _n("The resource's size in bytes."),
    "messages": _n(
        "Messages for a model: what prompts/get returned, or the conversation sampling/createMessage "
        "asks the client's model to continue.",
        MCP_PROMPTS,
    ),
    "role": _n("Who a message is from: user or assistant (in a prompt or a sampling request)."),
    "required": _n("Whether this prompt argument must be given.", MCP_PROMPTS),
    "ref": _n(
        "What completion/complete suggests values for (a prompt or a resource template).", MCP_COMPLETION
    ),
    "argument": _n("The argument being completed and what was typed so far.", MCP_COMPLETION),
    "value": _n("The text typed so far."),
    "values": _n("Suggested values.", MCP_COMPLETION),
    "total": _n("How many suggestions exist in all.", MCP_COMPLETION),
    "hasMore": _n("More suggestions exist than were sent.", MCP_COMPLETION),
    "completion": _n("The suggestions.", MCP_COMPLETION),
    "context": _n("Values of the other arguments, to narrow the suggestions.", MCP_COMPLETION),
    "cursor": _n("Where to continue a paginated list.", MCP),
    "nextCursor": _n("There is more: pass this cursor to get the next page.", MCP),
    "level": _n(
        "A syslog severity (debug … emergency): the least the server should send (logging/setLevel), "
        "or a log message's own (notifications/message).",
        MCP_LOGGING,
    ),
    "logger": _n("Which part of the server logged (notifications/message).", MCP_LOGGING),
    "progressToken": _n("Lets the server report progress on this request.", MCP_PROGRESS),
    "progress": _n("How far the request has got.", MCP_PROGRESS),
    "requestId": _n("The id of the request being cancelled.", f"{MCP}/basic/utilities/cancellation"),
    "reason": _n("Why the request was cancelled."),
    "supportedVersions": _n("The protocol revisions the server speaks (discovery).", MCP),
    "lastModified": _n("When the content last changed."),
    "priority": _n("How important the content is (0–1)."),
    "audience": _n("Who the content is for: user, assistant or both."),
    "_meta": _n(
        "Metadata about the message; in the stateless era it carries the protocol version and the "
        "client's capabilities and identity on every request.",
        MCP,
    ),
    "form": _n("Elicitation by a form the client shows its user.", MCP_ELICITATION),
    "url": _n("Elicitation by sending the user to a URL.", MCP_ELICITATION),
    "resultType": _n(
        "complete, or input_required: the server needs input from the client before it can answer.", MCP
    ),
    "ttlMs": _n("Caching hint: how long (ms) the client may reuse this list.", MCP),
    "cacheScope": _n("Caching hint: who may share the cached list.", MCP),
    "io.modelcontextprotocol/protocolVersion": _n(
        "Stateless era: the protocol revision this request speaks (there is no initialize).", MCP
    ),
    "io.modelcontextprotocol/clientCapabilities": _n(
        "Stateless era: the client's capabilities, sent with every request.", MCP
    ),
    "io.modelcontextprotocol/clientInfo": _n(
        "Stateless era: the client's name and version, on every request.", MCP
    ),
    "io.modelcontextprotocol/serverInfo": _n("Stateless era: the server's name and version.", MCP),
    # Elicitation: the server asks the client's user.
    "requestedSchema": _n(
        "The fields the server asks the user for, as a flat JSON Schema the client turns into a form.",
        MCP_ELICITATION,
    ),
    "action": _n(
        "The user's answer to an elicitation: accept (with the values in content), decline, or cancel "
        "(dismissed without a choice).",
        MCP_ELICITATION,
    ),
    "mode": _n(
        "How to ask: an elicitation's form (fields from requestedSchema) or url (a page to visit); in an "
        "MCP App, the display mode (inline, fullscreen, pip).",
        MCP_ELICITATION,
    ),
    "elicitationId": _n("Ties a URL-mode elicitation to its completion notice.", MCP_ELICITATION),
    # Sampling: the server asks the client's model.
    "maxTokens": _n("Sampling: the most tokens the client's model may write.", MCP_SAMPLING),
    "systemPrompt": _n(
        "Sampling: a system prompt the server asks for; the client may change it.", MCP_SAMPLING
    ),
    "includeContext": _n(
        "Sampling: which MCP context the client should add to the prompt — none, thisServer or allServers "
        "(the last two soft-deprecated).",
        MCP_SAMPLING,
    ),
    "temperature": _n(
        "Sampling: how random the client's model should be; the client may ignore it.", MCP_SAMPLING
    ),
    "stopSequences": _n("Sampling: text at which the client's model should stop writing.", MCP_SAMPLING),
    "metadata": _n("Sampling: provider-specific parameters passed through to the model.", MCP_SAMPLING),
    "modelPreferences": _n(
        "Sampling: what the server would like in a model; the client chooses the model.", MCP_SAMPLING
    ),
    "hints": _n(
        "Sampling: model names the server suggests (as substrings), most preferred first.", MCP_SAMPLING
    ),
    "costPriority": _n("Sampling: how much a cheap model matters (0–1).", MCP_SAMPLING),
    "speedPriority": _n("Sampling: how much a fast model matters (0–1).", MCP_SAMPLING),
    "intelligencePriority": _n("Sampling: how much a capable model matters (0–1).", MCP_SAMPLING),
    "toolChoice": _n(
        "Sampling with tools: whether the client's model may (auto), must (required) or must not (none) "
        "call one of the tools sent.",
        MCP_SAMPLING,
    ),
    "model": _n(
        "Sampling: the model the client used to answer — its own choice, not the server's.", MCP_SAMPLING
    ),
    "stopReason": _n(
        "Sampling: why the client's model stopped — endTurn, stopSequence, maxTokens or toolUse.",
        MCP_SAMPLING,
    ),
    # Stateless era: a request that needs input first (multi round-trip requests).
    "inputRequests": _n(
        "input_required: what the server needs before it can answer — elicitation, sampling or roots "
        "requests, each under a key the server chose; the client asks and sends the request again.",
        MCP_2026_CHANGES,
    ),
    "inputResponses": _n(
        "The client's answers to the server's inputRequests, under the same keys, sent with the request "
        "again.",
        MCP_2026_CHANGES,
    ),
    "requestState": _n(
        "Opaque state the server handed out with input_required; the client sends it back unchanged.",
        MCP_2026_CHANGES,
    ),
    "requiredCapabilities": _n(
        "The client capabilities a request needs; in error -32021, the ones the client did not declare.",
        MCP_2026_CHANGES,
    ),
    # MCP Apps (the io.modelcontextprotocol/ui extension): a tool's HTML interface.
    "ui": _n("MCP Apps: this tool's or resource's user-interface settings (_meta.ui).", MCP_APPS),
    "resourceUri": _n(
        "MCP Apps: the ui:// resource holding the tool's HTML interface; the host reads and renders it.",
        MCP_APPS,
    ),
    "ui/resourceUri": _n("MCP Apps, the earlier flat key: the tool's ui:// interface resource.", MCP_APPS),
    "visibility": _n(
        "MCP Apps: who may call the tool — model, app or both; an app-only tool is not shown to the model.",
        MCP_APPS,
    ),
    "csp": _n(
        "MCP Apps: the origins the app's HTML may reach; the host builds the frame's "
        "Content-Security-Policy from them (none listed: no network).",
        MCP_APPS,
    ),
    "connectDomains": _n(
        "MCP Apps: origins the app may fetch from or open sockets to (connect-src).", MCP_APPS
    ),
    "resourceDomains": _n(
        "MCP Apps: origins the app may load scripts, styles, images and fonts from.", MCP_APPS
    ),
    "frameDomains": _n("MCP Apps: origins the app may frame (frame-src).", MCP_APPS),
    "baseUriDomains": _n("MCP Apps: origins the app's base URI may point at (base-uri).", MCP_APPS),
    "permissions": _n(
        "MCP Apps: browser permissions the app asks for (camera, microphone, geolocation, clipboard "
        "write); the host decides what its frame gets.",
        MCP_APPS,
    ),
    "domain": _n("MCP Apps: a dedicated origin the app asks to be served from.", MCP_APPS),
    "prefersBorder": _n("MCP Apps: whether the app would like the host to draw a border round it.", MCP_APPS),
    # MCP Apps: the JSON-RPC messages the app and the host page exchange over postMessage.
    "appInfo": _n("MCP Apps, ui/initialize: the app's name and version.", MCP_APPS),
    "appCapabilities": _n(
        "MCP Apps, ui/initialize: what the app can do (tools it offers, display modes).", MCP_APPS
    ),
    "hostInfo": _n("MCP Apps: the host's name and version (here: this app).", MCP_APPS),
    "hostCapabilities": _n(
        "MCP Apps: what the host lets the app do — open links, call the server's tools, send messages, log.",
        MCP_APPS,
    ),
    "hostContext": _n(
        "MCP Apps: where the app is shown — theme, display mode, size limits, locale, the tool it belongs to.",
        MCP_APPS,
    ),
    "openLinks": _n("MCP Apps: the host opens links the app asks for (ui/open-link).", MCP_APPS),
    "serverTools": _n(
        "MCP Apps: the app may call the server's tools through the host (tools/call).", MCP_APPS
    ),
    "serverResources": _n("MCP Apps: the app may read the server's resources through the host.", MCP_APPS),
    "updateModelContext": _n(
        "MCP Apps: the app may add to what the model is told (ui/update-model-context).", MCP_APPS
    ),
    "sandbox": _n("MCP Apps: the sandbox the host frames the app in: its permissions and CSP.", MCP_APPS),
    "theme": _n("MCP Apps: light or dark, so the app can match the host page.", MCP_APPS),
    "displayMode": _n("MCP Apps: how the app is shown now (inline, fullscreen, pip).", MCP_APPS),
    "availableDisplayModes": _n("MCP Apps: the display modes the host (or the app) supports.", MCP_APPS),
    "platform": _n("MCP Apps: the kind of host — web, desktop or mobile.", MCP_APPS),
    "locale": _n("MCP Apps: the user's language (BCP 47).", MCP_APPS),
    "timeZone": _n("MCP Apps: the user's time zone (IANA name).", MCP_APPS),
    "userAgent": _n("MCP Apps: the host's user agent.", MCP_APPS),
    "containerDimensions": _n("MCP Apps: the room the host gives the app's frame.", MCP_APPS),
    "maxHeight": _n("MCP Apps: the tallest the app's frame may grow (px).", MCP_APPS),
    "maxWidth": _n("MCP Apps: the widest the app's frame may grow (px).", MCP_APPS),
    "height": _n("MCP Apps: a height in pixels (the app's size, or its frame's).", MCP_APPS),
    "width": _n("MCP Apps: a width in pixels (the app's size, or its frame's).", MCP_APPS),
    "toolInfo": _n("MCP Apps: the tool call the app belongs to.", MCP_APPS),
    "tool": _n("MCP Apps: the tool definition the app belongs to.", MCP_APPS),
}

# An HTTP server's OAuth flow (the host's own requests, recorded in the workbench): the metadata
# documents it discovers, the client registration, the token request (a form) and its answer.
_OAUTH: dict[str, Note] = {
    # Protected resource metadata (RFC 9728): what the MCP server says about itself.
    "resource": _n(
        "The MCP server's own URL: the protected resource a token is asked for (and bound to).", RFC_8707
    ),
    "authorization_servers": _n(
        "Where to get a token for this MCP server: the authorization servers it trusts.", RFC_9728
    ),
    "scopes_supported": _n("The scopes (permissions) a token may be asked for.", RFC_9728),
    "bearer_methods_supported": _n("How a token may be presented (e.g. the Authorization header).", RFC_9728),
    "resource_name": _n("A human-readable name of the protected resource.", RFC_9728),
    "resource_documentation": _n("A page about the protected resource.", RFC_9728),
    # Authorization server metadata (RFC 8414, OpenID Connect discovery).
    "issuer": _n("The authorization server's identifier: its metadata must name itself.", RFC_8414),
    "authorization_endpoint": _n("Where the user is sent to sign in and consent.", RFC_8414),
    "token_endpoint": _n("Where the client trades a code (or its credentials) for a token.", RFC_8414),
    "registration_endpoint": _n(
        "Where a client can register itself (dynamic client registration).", RFC_7591
    ),
    "revocation_endpoint": _n("Where a token can be revoked.", RFC_8414),
    "introspection_endpoint": _n("Where a token can be checked.", RFC_8414),
    "jwks_uri": _n("The authorization server's public signing keys.", RFC_8414),
    "userinfo_endpoint": _n("OpenID Connect: where to read the signed-in user's claims.", OIDC_DISCOVERY),
    "response_types_supported": _n("The authorization responses offered (code for this flow).", RFC_8414),
    "response_modes_supported": _n("How an authorization response may be returned.", RFC_8414),
    "grant_types_supported": _n(
        "The ways to get a token: authorization_code, refresh_token, client_credentials…", RFC_8414
    ),
    "code_challenge_methods_supported": _n(
        "PKCE methods offered: S256 proves the token request comes from whoever started the sign-in.",
        RFC_7636,
    ),
    "token_endpoint_auth_methods_supported": _n(
        "How a client may prove who it is at the token endpoint (none, client_secret_basic…).", RFC_8414
    ),
    "token_endpoint_auth_signing_alg_values_supported": _n(
        "Signature algorithms accepted for a client's signed assertion.", RFC_8414
    ),
    "client_id_metadata_document_supported": _n(
        "The client may use the URL of its metadata document as its client_id (no registration).",
        CLIENT_METADATA_DOCUMENT,
    ),
    "subject_types_supported": _n("OpenID Connect: the kinds of user identifier issued.", OIDC_DISCOVERY),
    "id_token_signing_alg_values_supported": _n("OpenID Connect: how ID tokens are signed.", OIDC_DISCOVERY),
    "claims_supported": _n("OpenID Connect: the user claims the server can return.", OIDC_DISCOVERY),
    "authorization_response_iss_parameter_supported": _n(
        "The authorization response names its issuer, so a mixed-up response can be caught.", RFC_8414
    ),
    # Dynamic client registration (RFC 7591).
    "client_name": _n("The client's human-readable name, shown on the consent page.", RFC_7591),
    "client_uri": _n("The client's home page.", RFC_7591),
    "redirect_uris": _n("Where the authorization server may send the user back with a code.", RFC_7591),
    "grant_types": _n("The grant types the client will use.", RFC_7591),
    "response_types": _n("The response types the client will use (code).", RFC_7591),
    "token_endpoint_auth_method": _n("How this client proves who it is at the token endpoint.", RFC_7591),
    "application_type": _n("web or native: what kind of application the client is.", RFC_7591),
    "client_id": _n("The client's identifier at the authorization server.", RFC_6749),
    "client_secret": _n("The client's secret (masked in the record).", RFC_6749),
    "client_id_issued_at": _n("When the client was registered (Unix seconds).", RFC_7591),
    "client_secret_expires_at": _n("When the client's secret expires (0: never).", RFC_7591),
    "software_id": _n("An identifier of the client software.", RFC_7591),
    "software_version": _n("The client software's version.", RFC_7591),
    "logo_uri": _n("The client's logo.", RFC_7591),
    "contacts": _n("Whom to contact about the client.", RFC_7591),
    # The token request (a form) and its answer (RFC 6749, PKCE, resource indicators).
    "grant_type": _n(
        "What the client trades for a token: authorization_code, refresh_token or client_credentials.",
        RFC_6749,
    ),
    "code": _n("The one-time code the user's sign-in returned (masked in the record).", RFC_6749),
    "redirect_uri": _n("The redirect URI the code was sent to; must match the one used.", RFC_6749),
    "code_verifier": _n(
        "PKCE: the secret whose hash was sent with the sign-in — proof the same client asks (masked).",
        RFC_7636,
    ),
    "scope": _n("The permissions asked for, or granted (space-separated).", RFC_6749),
    "client_assertion_type": _n("The kind of signed proof the client sends of who it is.", RFC_6749),
    "client_assertion": _n("The client's signed proof of who it is (masked in the record).", RFC_6749),
    "access_token": _n("The token the client sends to the MCP server (masked in the record).", RFC_6749),
    "token_type": _n("How to use the token: Bearer, in the Authorization header.", RFC_6749),
    "expires_in": _n("How many seconds the access token is valid.", RFC_6749),
    "refresh_token": _n("A token to get a new access token later without the user (masked).", RFC_6749),
    "id_token": _n("OpenID Connect: a signed statement of who signed in.", OIDC_DISCOVERY),
    "error": _n("Why the authorization server refused (e.g. invalid_grant).", RFC_6749),
    "error_description": _n("The refusal explained in words.", RFC_6749),
    "error_uri": _n("A page about the refusal.", RFC_6749),
}

FIELD_NOTES: Mapping[str, Mapping[str, Note]] = {
    "openai_chat": {**_MODEL_COMMON, **_OPENAI_CHAT},
    "openai_responses": {**_MODEL_COMMON, **_OPENAI_RESPONSES},
    "anthropic": {**_MODEL_COMMON, **_ANTHROPIC},
    "gemini": {**_MODEL_COMMON, **_GEMINI},
    "mcp": _MCP,
    "oauth": _OAUTH,
}

# Fields whose value is the tool's or the user's own data (arguments, a JSON Schema, metadata):
# its inner names are not protocol fields, so they are not walked.
OPAQUE: Mapping[str, frozenset[str]] = {
    "openai_chat": frozenset({"parameters", "schema", "metadata", "logit_bias"}),
    "openai_responses": frozenset({"parameters", "schema", "metadata"}),
    "anthropic": frozenset({"input_schema", "input", "schema", "metadata"}),
    "gemini": frozenset(
        {"parameters", "parametersJsonSchema", "args", "response", "responseSchema", "responseJsonSchema"}
    ),
    "mcp": frozenset(
        {
            "inputSchema",
            "outputSchema",
            "arguments",
            "structuredContent",
            "requestedSchema",
            "experimental",
            "schema",
            "metadata",
        }
    ),
}

# Objects whose keys the sender chose (the server's names for its input requests): the keys are
# not fields, so they are not listed; the values are protocol objects and are walked.
KEYED_BY_DATA: Mapping[str, frozenset[str]] = {"mcp": frozenset({"inputRequests", "inputResponses"})}
# A field whose value is the user's own data only beside another one: an elicitation answer's
# ``content`` (beside its ``action``) holds the values the user typed, whereas a tool result's
# ``content`` is protocol blocks.
OPAQUE_BESIDE: Mapping[str, Mapping[str, str]] = {"mcp": {"content": "action"}}


def body_format(*, channel: str, label: str) -> str:
    """The format a recorded body speaks: ``mcp`` for the MCP channel (``oauth`` for the HTTP
    records of an OAuth flow), else the provider format its HTTP path names
    (docs/wire-formats.md §1, §3, §4, §5)."""
    if channel != "llm":
        return "oauth" if label.startswith(OAUTH_LABEL) else "mcp"
    if "/chat/completions" in label:
        return "openai_chat"
    if "/responses" in label:
        return "openai_responses"
    if "/messages" in label:
        return "anthropic"
    if "generateContent" in label or "models/" in label:
        return "gemini"
    return "openai_chat"


def _documents(body: str, *, form: bool = False) -> Iterator[JSONValue]:
    """The JSON documents in a body: the body itself, or each ``data:`` line of an event stream,
    or each line of JSON Lines; with ``form``, a URL-encoded form (an OAuth token request) as an
    object of its fields. Text that is none of these yields nothing."""
    text = body.strip()
    if not text:
        return
    try:
        yield json.loads(text)
        return
    except (ValueError, RecursionError):  # RecursionError: JSON nested thousands deep
        pass
    if form and "=" in text and not text.startswith(("{", "[")) and "\n" not in text:
        try:
            pairs = parse_qsl(text, keep_blank_values=True, strict_parsing=True, max_num_fields=200)
        except ValueError:
            pairs = []
        if pairs:
            yield {name: value for name, value in pairs}
            return
    for line in text.splitlines():
        line = line.strip()
        if line.startswith("data:"):
            line = line[5:].strip()
        if not line.startswith(("{", "[")):
            continue
        try:
            yield json.loads(line)
        except (ValueError, RecursionError):
            continue


@dataclass(frozen=True)
class _Rules:
    """How one format's bodies are walked (:data:`OPAQUE`, :data:`KEYED_BY_DATA`, :data:`OPAQUE_BESIDE`)."""

    opaque: frozenset[str]
    keyed: frozenset[str]
    beside: Mapping[str, str]


_Entry = tuple[str | None, JSONValue, bool]


def _members(value: Mapping[str, JSONValue], rules: _Rules) -> Iterator[_Entry]:
    """An object's members; each flagged when its value is data by :data:`OPAQUE_BESIDE`."""
    data = {name for name, sibling in rules.beside.items() if name in value and sibling in value}
    return ((key, item, key in data) for key, item in value.items())


def _walk(value: JSONValue, rules: _Rules, seen: dict[str, None]) -> None:
    """Every key in ``value`` in document order (depth first). A loop over its own stack of
    iterators, so a body nested as deep as a JSON parser allows (untrusted) cannot exhaust
    Python's."""
    stack: list[Iterator[_Entry]] = [iter([(None, value, False)])]
    while stack:
        entry = next(stack[-1], None)
        if entry is None:
            stack.pop()
            continue
        key, current, data = entry
        if key is not None:
            seen.setdefault(key, None)
            if data or key in rules.opaque:
                continue
        if isinstance(current, dict):
            if key in rules.keyed:
                stack.append((None, item, False) for item in current.values())
            else:
                stack.append(_members(current, rules))
        elif isinstance(current, list):
            stack.append((None, item, False) for item in current)


def field_names(body: str, fmt: str) -> list[str]:
    """Every field name in ``body`` (a JSON body, an event stream, or an OAuth form), in order of
    first appearance, not looking inside :data:`OPAQUE` values nor listing the keys of
    :data:`KEYED_BY_DATA` objects."""
    seen: dict[str, None] = {}
    rules = _Rules(
        OPAQUE.get(fmt, frozenset()), KEYED_BY_DATA.get(fmt, frozenset()), OPAQUE_BESIDE.get(fmt, {})
    )
    for document in _documents(body, form=fmt == "oauth"):
        _walk(document, rules, seen)
    return list(seen)


def note_for(name: str, fmt: str) -> Note | None:
    return FIELD_NOTES.get(fmt, {}).get(name)


def field_notes(body: str, fmt: str) -> list[FieldNote]:
    """Each field of ``body`` with its note (None where the table has none)."""
    return [FieldNote(name, note_for(name, fmt)) for name in field_names(body, fmt)]


# --- Roles and layers ---------------------------------------------------------------------

ROLES: Mapping[str, str] = {
    "Host": "this app: it runs the loop, talks to the model, and decides which tool calls to execute",
    "Client": "the host's MCP session for one server (one client per server)",
    "Server": "the MCP server: it lists its tools and executes a call when asked",
    "Model": "the LLM behind the provider's API: it reads text and writes text; it is no MCP party",
}


@dataclass(frozen=True)
class Roles:
    """Who sends a row's message to whom, and what that means, in one line."""

    sender: str
    receiver: str
    text: str
    spec: str = ""


def exchange_roles(*, channel: str, direction: str, label: str, server: str) -> Roles:
    """The parties of one recorded exchange (``direction`` as ``Exchange.Direction``)."""
    if channel == "llm":
        return Roles(
            "Host",
            "Model",
            f"The host asks the model over the provider's HTTP API ({label}); the model is not a party to MCP.",
        )
    server = server or "the server"
    if label == "stderr":
        return Roles("Server", "Host", f"What {server}'s process wrote to stderr (not a protocol message).")
    if direction == "server":
        return Roles(
            "Server",
            "Client",
            f"{server} (Server) sends {label} to the host's MCP session for it (Client).",
            MCP,
        )
    if label == "tools/call":
        return Roles(
            "Client",
            "Server",
            f"EXECUTE: the host runs the model's selected call through its MCP session (Client) on {server} (Server).",
            MCP_TOOLS,
        )
    return Roles(
        "Client",
        "Server",
        f"The host's MCP session for {server} (Client) sends {label} to {server} (Server).",
        MCP,
    )


# What each kind of row (step) is, for the row's teaching line.
STEP_NOTES: Mapping[str, str] = {
    "connect": "Client ⇄ Server: the host opens an MCP session with each server and lists its tools "
    "(initialize or server/discover, then tools/list).",
    "decide": "Host ⇄ Model: the host sends the conversation and the tool definitions (prompt text) to the "
    "model; the model SELECTS a tool or answers. Nothing runs on the model's side.",
    "tool": "Host → Client → Server: the host EXECUTES a selected call with tools/call.",
    "answer": "Model → Host: the model wrote a final answer instead of selecting a tool.",
    "fallback": "Host: the provider refused a paradigm, so the host retries with the next one down.",
    "error": "Host: the turn could not go on; the row says why.",
}

SELECT_NOTE = Note(
    "The model chose this tool and these arguments (function calling). It ran nothing: "
    "the host checks the call against the tool's inputSchema and then executes it.",
    OPENAI_FUNCTIONS,
)
EXECUTE_NOTE = Note(
    "The host's MCP client sent tools/call to the server, which ran the tool; its result "
    "goes back to the model in the next request.",
    MCP_TOOLS,
)

# The five columns of a row, as layers.
LAYERS: Mapping[str, str] = {
    "prompt": "The spliced prompt: the text the model actually reads, tool definitions included — "
    "tool definitions are prompt text.",
    "request": "The exact HTTP request body the host sent to the model's provider, in its wire format.",
    "response": "The exact reply the provider sent back, before anything parsed it.",
    "parsed": "What the host's parser read out of the reply: the selected tool call(s), checked against "
    "the tool's inputSchema — or the final answer.",
    "rpc_request": "The JSON-RPC request the host's MCP client sent to the server: tools/call executes the tool.",
    "rpc_result": "The server's JSON-RPC response: the tool's result (isError true if the tool failed).",
    "answer": "The model's final answer: it selected no tool, so the turn ends.",
    "connect": "Before the model is asked, the host's MCP client connects to each server and lists its tools.",
    "fallback": "The provider refused this paradigm; the host falls back to the next one down the ladder.",
    "error": "Something failed; the record keeps why.",
}


def turn_tool_choice(mode: str, name: str = "") -> str:
    """A turn's tool_choice as the pages write it: the mode, and the named tool."""
    return f"{mode} → {name}" if mode == "named" and name else mode


_DECODER = json.JSONDecoder()
_SPACES = re.compile(r"[ \t\n\r]*")
# A key found this many times without being the top-level one (nested ones): the body is read whole.
_MEMBER_TRIES = 8
MISSING = object()


def _skip(body: str, at: int) -> int:
    """The first position from ``at`` that is not JSON whitespace."""
    found = _SPACES.match(body, at)
    return found.end() if found is not None else at


def top_level_member(body: str, key: str) -> object:
    """``json.loads(body).get(key, MISSING)`` for the text of a JSON object, reading only the
    member and those after it — a model request's history, most of its hundreds of kB, is not
    read to find a field beside it. Like ``json.loads``, the last of duplicate members wins.

    The quoted key is looked for from the end; an occurrence counts when it starts a member
    (after ``{`` or ``,``), its value reads as JSON and the members after it close the outermost
    object (``_closes_the_object``): a key nested deeper, a value or a piece of a string fails
    one of those. A key written with escapes (``"tool\\u005fchoice"``) is not recognised, and a
    body whose part before the member is not JSON still answers (what a page shows of a request
    it can read); past ``_MEMBER_TRIES`` nested occurrences the body is read whole."""
    needle = json.dumps(key)
    end = len(body)
    for _ in range(_MEMBER_TRIES):
        found = body.rfind(needle, 0, end)
        if found < 0:
            return MISSING
        end = found
        value = _member_value(body, found, found + len(needle))
        if value is not MISSING:
            return value
    try:
        data = json.loads(body)
    except (ValueError, RecursionError):
        return MISSING
    return data.get(key, MISSING) if isinstance(data, dict) else MISSING


def _member_value(body: str, start: int, after_key: int) -> object:
    """The value of the member whose key spans ``body[start:after_key]``, if that is a member of
    the outermost object; else ``MISSING``."""
    before = start - 1
    while before >= 0 and body[before] in " \t\n\r":
        before -= 1
    if before < 0 or body[before] not in "{,":
        return MISSING
    at = _skip(body, after_key)
    if body[at : at + 1] != ":":
        return MISSING
    try:
        value, at = _DECODER.raw_decode(body, _skip(body, at + 1))
    except (ValueError, RecursionError):
        return MISSING
    return value if _closes_the_object(body, at) else MISSING


def _closes_the_object(body: str, at: int) -> bool:
    """Whether ``body[at:]`` is more members of one object, its closing brace, then only
    whitespace: true after a member of the outermost object, false after a nested one (whose own
    closing bracket comes first)."""
    while True:
        at = _skip(body, at)
        mark = body[at : at + 1]
        if mark == "}":
            return _skip(body, at + 1) == len(body)
        if mark != ",":
            return False
        at = _skip(body, at + 1)
        if body[at : at + 1] != '"':
            return False
        try:
            _, at = _DECODER.raw_decode(body, at)  # the key
            at = _skip(body, at)
            if body[at : at + 1] != ":":
                return False
            _, at = _DECODER.raw_decode(body, _skip(body, at + 1))
        except (ValueError, RecursionError):
            return False


def sent_tool_choice(body: str, fmt: str, *, in_words: str = "") -> str:
    """The tool_choice a model request sent, as written on the wire (compact JSON for an object);
    for a request without one, why (docs/wire-formats.md §1, §3, §4, §5). ``in_words`` is the
    turn's tool_choice (:func:`turn_tool_choice`): a request that sends no tools field is a
    paradigm's, whose prompt says that tool_choice in words. Only the members it needs are read
    (``top_level_member``): the request's history beside them is most of the body."""
    if not body.lstrip(" \t\n\r").startswith("{"):
        return ""

    def member(key: str) -> JSONValue:
        found = top_level_member(body, key)
        return None if found is MISSING else cast(JSONValue, found)

    value: JSONValue
    if fmt == "gemini":
        config = top_level_member(body, "toolConfig")
        if config is MISSING:
            config = member("tool_config")
        value = None
        if isinstance(config, dict):
            value = config.get("functionCallingConfig", config.get("function_calling_config"))
    else:
        value = member("tool_choice")
    if value is None:
        has_tools = bool(member("tools"))
        if has_tools:
            return "not sent (the provider's default: auto)"
        if in_words:
            return f"{in_words} — not a field: the prompt says it in words"
        return "not sent (no tools field: any tools are prompt text)"
    return value if isinstance(value, str) else json.dumps(value, ensure_ascii=False, separators=(",", ":"))
