"""Host presets: how the main hosts present an MCP server's tools to their model.

A host (an API client such as the OpenAI or Anthropic SDK, or an application such as Claude
Code, Cursor or VS Code) never sends a tool definition exactly as the server listed it: it gives
the tool a name of its own, may rewrite the ``inputSchema`` into the subset its model API
accepts, and refuses what breaks its limits. A :class:`HostPreset` is one host's rules, each
with the public page it comes from and how sure we are of it (docs/hosts.md):

- ``documented``: the provider's or host's own documentation says so;
- ``observed``: not in the documentation, but seen in the host's error messages or behaviour
  (the source names where);
- ``assumed``: nothing public says; the preset does what the host is most likely to do, and
  the page says it is an assumption.

The registry ``HOSTS`` is keyed by the name ``--host`` and ``ModelProfile.host_preset`` take.
Pure data and no framework: the loop reads it (a turn run "as host H"), so do the reports.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Literal

Status = Literal["documented", "observed", "assumed"]
# How a host names a server's tool for its model.
Naming = Literal["as_is", "claude", "vscode"]
# What a host does to the inputSchema: send it unchanged (after its checks), make it strict
# (OpenAI's strict subset), or convert it to Gemini's OpenAPI subset.
SchemaMode = Literal["as_is", "strict", "gemini_parameters"]
# The shape of the tool definition on the wire.
Api = Literal["openai_chat", "openai_responses", "anthropic", "gemini", "gemini_json"]

OPENAI_FUNCTION_CALLING = "https://platform.openai.com/docs/guides/function-calling"
OPENAI_CHAT_REFERENCE = "https://platform.openai.com/docs/api-reference/chat/create"
OPENAI_STRUCTURED = "https://platform.openai.com/docs/guides/structured-outputs#supported-schemas"
OPENAI_RESPONSES_REFERENCE = "https://platform.openai.com/docs/api-reference/responses/create"
OPENAI_DESCRIPTION_1024 = "https://github.com/getsentry/sentry-mcp/issues/106"
OPENAI_ROOT_OBJECT = "https://github.com/browserbase/stagehand/issues/1159"
OPENAI_ARRAY_ITEMS = "https://github.com/mark3labs/mcphost/issues/35"
ANTHROPIC_TOOLS = "https://docs.anthropic.com/en/docs/agents-and-tools/tool-use/implement-tool-use"
ANTHROPIC_MESSAGES = "https://docs.anthropic.com/en/api/messages"
GEMINI_DECLARATION = "https://ai.google.dev/api/caching#FunctionDeclaration"
GEMINI_SCHEMA = "https://ai.google.dev/api/caching#Schema"
CLAUDE_CODE_IAM = "https://docs.anthropic.com/en/docs/claude-code/iam"
CLAUDE_CODE_MCP = "https://docs.anthropic.com/en/docs/claude-code/mcp"
CLAUDE_DESKTOP_MCP = "https://modelcontextprotocol.io/quickstart/user"
CURSOR_MCP = "https://docs.cursor.com/context/model-context-protocol"
CURSOR_NAME_LENGTH = "https://github.com/ComposioHQ/composio/issues/2788"
VSCODE_MCP = "https://code.visualstudio.com/docs/copilot/chat/mcp-servers"


@dataclass(frozen=True)
class Rule:
    """One rule of a host: what it does, where that is published, how sure we are."""

    text: str
    source: str
    status: Status


@dataclass(frozen=True)
class HostPreset:
    """One host's way of presenting MCP tools to its model.

    ``name_pattern`` is what the host's model API accepts for a tool name (a name that does not
    match is refused); ``naming`` how the host builds that name from the server's and the
    tool's. ``tool_limit`` (tools past it are refused: not sent, or the request fails) and
    ``description_limit`` (a longer description is refused) are None where the host has none
    we know of. ``strict`` is the ``strict`` flag the definition carries on the wire (None:
    left out).
    """

    key: str
    label: str
    api: Api
    naming: Naming
    name_pattern: str
    name_rule: Rule
    naming_rule: Rule
    schema_mode: SchemaMode
    schema_rule: Rule
    tool_limit: int | None = None
    tool_limit_rule: Rule | None = None
    description_limit: int | None = None
    description_rule: Rule | None = None
    strict: bool | None = None
    # The model API refuses a definition whose inputSchema is not an object at the root.
    root_object: Rule | None = None
    # The model API refuses an array schema without ``items``.
    array_items: Rule | None = None
    # Two tools of one request may not share a name.
    unique_rule: Rule | None = None
    # The server's name and the tool's together must be shorter than this (Cursor).
    combined_limit: int | None = None
    combined_rule: Rule | None = None

    @property
    def name_re(self) -> re.Pattern[str]:
        return re.compile(self.name_pattern)

    def rules(self) -> list[Rule]:
        """Every rule of the preset, in the order the reports give them."""
        found = [
            self.naming_rule,
            self.name_rule,
            self.combined_rule,
            self.schema_rule,
            self.root_object,
            self.array_items,
            self.description_rule,
            self.tool_limit_rule,
            self.unique_rule,
        ]
        return [rule for rule in found if rule is not None]


OPENAI_NAME = r"^[a-zA-Z0-9_-]{1,64}$"
ANTHROPIC_NAME = r"^[a-zA-Z0-9_-]{1,64}$"
GEMINI_NAME = r"^[a-zA-Z_][a-zA-Z0-9_.:-]{0,127}$"

_OPENAI_NAME_RULE = Rule(
    "a function name is 1-64 letters, digits, '_' or '-'", OPENAI_CHAT_REFERENCE, "documented"
)
_AS_IS = Rule("the MCP tool name is the function name, unchanged", OPENAI_FUNCTION_CALLING, "assumed")
_OPENAI_TOOLS = Rule("at most 128 functions in one request", OPENAI_CHAT_REFERENCE, "documented")
_OPENAI_DESCRIPTION = Rule(
    "a function description longer than 1024 characters is refused (string_above_max_length)",
    OPENAI_DESCRIPTION_1024,
    "observed",
)
_OPENAI_ROOT = Rule(
    "parameters must be a JSON Schema of type 'object' at the root", OPENAI_ROOT_OBJECT, "observed"
)
_OPENAI_ITEMS = Rule("an array schema without 'items' is refused", OPENAI_ARRAY_ITEMS, "observed")
_STRICT = Rule(
    "strict mode: every object lists all its properties in 'required' (an optional one becomes "
    "nullable) and sets additionalProperties false; only the strict subset of JSON Schema is kept; "
    "at most 10 levels of nesting, 5000 properties and 1000 enum values",
    OPENAI_STRUCTURED,
    "documented",
)
_UNIQUE_OBSERVED = Rule("two tools of one request may not share a name", OPENAI_FUNCTION_CALLING, "observed")
_ANTHROPIC_NAME_RULE = Rule(
    "a tool name matches ^[a-zA-Z0-9_-]{1,64}$ (no dots)", ANTHROPIC_TOOLS, "documented"
)
_ANTHROPIC_ROOT = Rule(
    "input_schema is a JSON Schema object (type 'object')", ANTHROPIC_MESSAGES, "documented"
)
_ANTHROPIC_UNIQUE = Rule("tool names are unique within a request", ANTHROPIC_MESSAGES, "observed")
_GEMINI_NAME_RULE = Rule(
    "a function name starts with a letter or '_', then letters, digits, '_', '.', ':' or '-', "
    "at most 128 characters (64 in older API versions)",
    GEMINI_DECLARATION,
    "documented",
)
_GEMINI_UNIQUE = Rule("function names are unique within a request", GEMINI_DECLARATION, "assumed")

HOSTS: dict[str, HostPreset] = {
    preset.key: preset
    for preset in (
        HostPreset(
            key="openai",
            label="OpenAI function calling (Chat Completions, non-strict)",
            api="openai_chat",
            naming="as_is",
            name_pattern=OPENAI_NAME,
            name_rule=_OPENAI_NAME_RULE,
            naming_rule=_AS_IS,
            schema_mode="as_is",
            schema_rule=Rule(
                "without strict the parameters schema is sent as it is; the model is not held to it",
                OPENAI_FUNCTION_CALLING,
                "documented",
            ),
            tool_limit=128,
            tool_limit_rule=_OPENAI_TOOLS,
            description_limit=1024,
            description_rule=_OPENAI_DESCRIPTION,
            root_object=_OPENAI_ROOT,
            array_items=_OPENAI_ITEMS,
            unique_rule=_UNIQUE_OBSERVED,
        ),
        HostPreset(
            key="openai-strict",
            label="OpenAI function calling, strict (Chat Completions, strict: true)",
            api="openai_chat",
            naming="as_is",
            name_pattern=OPENAI_NAME,
            name_rule=_OPENAI_NAME_RULE,
            naming_rule=_AS_IS,
            schema_mode="strict",
            schema_rule=_STRICT,
            tool_limit=128,
            tool_limit_rule=_OPENAI_TOOLS,
            description_limit=1024,
            description_rule=_OPENAI_DESCRIPTION,
            strict=True,
            root_object=_OPENAI_ROOT,
            unique_rule=_UNIQUE_OBSERVED,
        ),
        HostPreset(
            key="openai-responses",
            label="OpenAI Responses API (a function without 'strict' is strict)",
            api="openai_responses",
            naming="as_is",
            name_pattern=OPENAI_NAME,
            name_rule=_OPENAI_NAME_RULE,
            naming_rule=_AS_IS,
            schema_mode="strict",
            schema_rule=Rule(
                _STRICT.text + " (the Responses API makes a function strict when 'strict' is left out)",
                OPENAI_RESPONSES_REFERENCE,
                "documented",
            ),
            tool_limit=128,
            tool_limit_rule=Rule(
                "at most 128 functions in one request", OPENAI_RESPONSES_REFERENCE, "assumed"
            ),
            description_limit=1024,
            description_rule=Rule(_OPENAI_DESCRIPTION.text, OPENAI_DESCRIPTION_1024, "assumed"),
            strict=True,
            root_object=_OPENAI_ROOT,
            unique_rule=_UNIQUE_OBSERVED,
        ),
        HostPreset(
            key="anthropic",
            label="Anthropic Messages API",
            api="anthropic",
            naming="as_is",
            name_pattern=ANTHROPIC_NAME,
            name_rule=_ANTHROPIC_NAME_RULE,
            naming_rule=Rule("the MCP tool name is the tool name, unchanged", ANTHROPIC_TOOLS, "assumed"),
            schema_mode="as_is",
            schema_rule=Rule("input_schema is sent as the server wrote it", ANTHROPIC_TOOLS, "documented"),
            root_object=_ANTHROPIC_ROOT,
            unique_rule=_ANTHROPIC_UNIQUE,
        ),
        HostPreset(
            key="gemini",
            label="Gemini function calling, 'parameters' (OpenAPI subset)",
            api="gemini",
            naming="as_is",
            name_pattern=GEMINI_NAME,
            name_rule=_GEMINI_NAME_RULE,
            naming_rule=Rule(
                "the MCP tool name is the function name, unchanged", GEMINI_DECLARATION, "assumed"
            ),
            schema_mode="gemini_parameters",
            schema_rule=Rule(
                "'parameters' is a subset of the OpenAPI 3.0 Schema object: $ref is inlined, a type "
                "list becomes one type plus nullable, oneOf becomes anyOf, const a one-value enum, "
                "non-string enums and keywords outside the subset (additionalProperties, $schema, "
                "exclusiveMinimum, ...) are dropped",
                GEMINI_SCHEMA,
                "documented",
            ),
            unique_rule=_GEMINI_UNIQUE,
        ),
        HostPreset(
            key="gemini-json",
            label="Gemini function calling, 'parametersJsonSchema' (JSON Schema)",
            api="gemini_json",
            naming="as_is",
            name_pattern=GEMINI_NAME,
            name_rule=_GEMINI_NAME_RULE,
            naming_rule=Rule(
                "the MCP tool name is the function name, unchanged", GEMINI_DECLARATION, "assumed"
            ),
            schema_mode="as_is",
            schema_rule=Rule(
                "'parametersJsonSchema' takes the JSON Schema as it is (exclusive with 'parameters')",
                GEMINI_DECLARATION,
                "documented",
            ),
            unique_rule=_GEMINI_UNIQUE,
        ),
        HostPreset(
            key="claude",
            label="Claude Desktop / Claude Code",
            api="anthropic",
            naming="claude",
            name_pattern=ANTHROPIC_NAME,
            name_rule=Rule(
                _ANTHROPIC_NAME_RULE.text + "; a longer prefixed name is refused",
                ANTHROPIC_TOOLS,
                "assumed",
            ),
            naming_rule=Rule(
                "a server's tool is named mcp__<server>__<tool> (documented for Claude Code; Claude "
                "Desktop is assumed to do the same); characters outside [a-zA-Z0-9_-] become '_' (observed)",
                CLAUDE_CODE_IAM,
                "documented",
            ),
            schema_mode="as_is",
            schema_rule=Rule("input_schema is sent as the server wrote it", CLAUDE_CODE_MCP, "assumed"),
            root_object=_ANTHROPIC_ROOT,
            unique_rule=_ANTHROPIC_UNIQUE,
        ),
        HostPreset(
            key="cursor",
            label="Cursor",
            api="openai_chat",
            naming="as_is",
            name_pattern=OPENAI_NAME,
            name_rule=Rule(
                "a tool name is 1-64 letters, digits, '_' or '-' (the model APIs' rule)",
                CURSOR_MCP,
                "assumed",
            ),
            naming_rule=Rule(
                "the tool keeps its MCP name (Cursor does not publish how it names tools for the model)",
                CURSOR_MCP,
                "assumed",
            ),
            combined_limit=60,
            combined_rule=Rule(
                "a tool whose server name and tool name together are 60 characters or more is filtered "
                "out, with a warning in Cursor's MCP settings",
                CURSOR_NAME_LENGTH,
                "observed",
            ),
            schema_mode="as_is",
            schema_rule=Rule("the inputSchema is passed on as it is", CURSOR_MCP, "assumed"),
            tool_limit=40,
            tool_limit_rule=Rule(
                "only the first 40 tools of all enabled servers are sent to the agent",
                CURSOR_MCP,
                "documented",
            ),
            unique_rule=Rule("two tools may not share a name", CURSOR_MCP, "assumed"),
        ),
        HostPreset(
            key="vscode",
            label="VS Code (GitHub Copilot agent mode)",
            api="openai_chat",
            naming="vscode",
            name_pattern=OPENAI_NAME,
            name_rule=Rule(
                "the prefixed name is at most 64 letters, digits, '_' or '-' (the model APIs' rule)",
                VSCODE_MCP,
                "assumed",
            ),
            naming_rule=Rule(
                "a server's tool is named mcp_<server>_<tool>, characters outside [a-zA-Z0-9_-] as '_' "
                "(VS Code does not document the name its model is given)",
                VSCODE_MCP,
                "assumed",
            ),
            schema_mode="as_is",
            schema_rule=Rule("the inputSchema is passed on as it is", VSCODE_MCP, "assumed"),
            tool_limit=128,
            tool_limit_rule=Rule(
                "a chat request can have at most 128 tools enabled", VSCODE_MCP, "documented"
            ),
            unique_rule=Rule("two tools may not share a name", VSCODE_MCP, "assumed"),
        ),
    )
}

HOST_CHOICES: list[tuple[str, str]] = [(key, preset.label) for key, preset in HOSTS.items()]
