"""The provider registry's lookups over each provider's facts: OpenTelemetry names, usage keys,
and where a tool call sits in recorded bodies."""

from __future__ import annotations

from conversations.loop.providers import (
    OTEL_PROVIDER_NAMES,
    PROVIDERS,
    USAGE_INPUT_KEYS,
    USAGE_OUTPUT_KEYS,
    otel_provider_name,
    wire_excerpts,
)
from conversations.typealias import JSONDict


def test_each_format_has_its_well_known_gen_ai_provider_name() -> None:
    assert OTEL_PROVIDER_NAMES == {
        "openai_chat": "openai",
        "openai_responses": "openai",
        "anthropic": "anthropic",
        "gemini": "gcp.gemini",
    }
    assert otel_provider_name("anthropic") == "anthropic"
    assert otel_provider_name("llamafile") == "llamafile"


def test_usage_keys_name_every_formats_token_counts_once_in_registry_order() -> None:
    assert USAGE_INPUT_KEYS == ("prompt_tokens", "input_tokens", "promptTokenCount")
    assert USAGE_OUTPUT_KEYS == ("completion_tokens", "output_tokens", "candidatesTokenCount")
    for provider in PROVIDERS.values():
        assert provider.usage_input_key in USAGE_INPUT_KEYS
        assert provider.usage_output_key in USAGE_OUTPUT_KEYS


def test_wire_excerpts_are_the_pieces_of_the_recorded_bodies() -> None:
    call: JSONDict = {"id": "call_1", "type": "function", "function": {"name": "echo", "arguments": "{}"}}
    assistant: JSONDict = {"role": "assistant", "content": None, "tool_calls": [call]}
    result: JSONDict = {"role": "tool", "tool_call_id": "call_1", "content": "ok"}
    request: JSONDict = {"messages": [{"role": "user", "content": "hi"}, assistant, result]}
    response: JSONDict = {"choices": [{"message": assistant}]}

    found = wire_excerpts("openai_chat", request, response)

    assert found is not None
    assert (found.sent, found.replayed, found.result) == (assistant, assistant, result)
    assert wire_excerpts("openai_chat", request, None) is not None
    assert wire_excerpts("anthropic", request, response) is None
    assert wire_excerpts("no-such-format", request, response) is None
