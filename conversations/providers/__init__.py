"""Provider registry: wire formats by key (the ModelProfile's ``provider`` choices)."""

from conversations.providers.anthropic import AnthropicProvider
from conversations.providers.base import Endpoint, ModelReply, ModelRequest, Provider, ProviderError
from conversations.providers.gemini import GeminiProvider
from conversations.providers.openai_chat import OpenAIChatProvider
from conversations.providers.openai_responses import OpenAIResponsesProvider

PROVIDERS: dict[str, type[Provider]] = {
    provider.key: provider
    for provider in (OpenAIChatProvider, OpenAIResponsesProvider, AnthropicProvider, GeminiProvider)
}

__all__ = ["PROVIDERS", "Endpoint", "ModelReply", "ModelRequest", "Provider", "ProviderError"]
