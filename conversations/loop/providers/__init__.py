"""Provider registry: wire formats by key (the ModelProfile's ``provider`` choices).

And lookups over the facts each provider class carries (see
:class:`conversations.loop.providers.base.Provider`), for code that reads the record by provider key.
"""

from conversations.loop.providers.anthropic import AnthropicProvider
from conversations.loop.providers.base import Endpoint, ModelReply, ModelRequest, Provider, ProviderError
from conversations.loop.providers.excerpts import WireExcerpts
from conversations.loop.providers.gemini import GeminiProvider
from conversations.loop.providers.openai_chat import OpenAIChatProvider
from conversations.loop.providers.openai_responses import OpenAIResponsesProvider
from conversations.typealias import JSONDict

PROVIDERS: dict[str, type[Provider]] = {
    provider.key: provider
    for provider in (OpenAIChatProvider, OpenAIResponsesProvider, AnthropicProvider, GeminiProvider)
}

# gen_ai.provider.name by provider key.
OTEL_PROVIDER_NAMES: dict[str, str] = {key: provider.otel_name for key, provider in PROVIDERS.items()}
# The usage keys of every format, each once: the token counts under whatever name a provider gave them.
USAGE_INPUT_KEYS: tuple[str, ...] = tuple(dict.fromkeys(p.usage_input_key for p in PROVIDERS.values()))
USAGE_OUTPUT_KEYS: tuple[str, ...] = tuple(dict.fromkeys(p.usage_output_key for p in PROVIDERS.values()))


def otel_provider_name(provider: str) -> str:
    """The ``gen_ai.provider.name`` of a provider key; a key no provider has stands for itself."""
    return OTEL_PROVIDER_NAMES.get(provider, provider)


def wire_excerpts(provider: str, request: JSONDict, response: JSONDict | None) -> WireExcerpts | None:
    """The first tool call and its result in a provider's recorded bodies (``Provider.excerpts``);
    None when they are not there, or no provider has that key."""
    found = PROVIDERS.get(provider)
    return None if found is None else found.excerpts(request, response)


__all__ = [
    "OTEL_PROVIDER_NAMES",
    "PROVIDERS",
    "USAGE_INPUT_KEYS",
    "USAGE_OUTPUT_KEYS",
    "Endpoint",
    "ModelReply",
    "ModelRequest",
    "Provider",
    "ProviderError",
    "WireExcerpts",
    "otel_provider_name",
    "wire_excerpts",
]
