"""Provider registry: wire formats by key (the ModelProfile's ``provider`` choices)."""

from conversations.providers.base import Endpoint, ModelReply, ModelRequest, Provider, ProviderError
from conversations.providers.openai_chat import OpenAIChatProvider

PROVIDERS: dict[str, type[Provider]] = {provider.key: provider for provider in (OpenAIChatProvider,)}

__all__ = ["PROVIDERS", "Endpoint", "ModelReply", "ModelRequest", "Provider", "ProviderError"]
