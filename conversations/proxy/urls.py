"""The LLM proxy's routes, included at ``proxy/<str:key>/`` (docs/proxy-llm.md).

Each mount mirrors its SDK's base URL: ``openai/v1`` (OpenAI's base URL ends in ``/v1``),
``anthropic`` and ``gemini`` (those SDKs add the version themselves).
"""

from django.urls import path, re_path

from conversations.proxy import llm

urlpatterns = [
    path("openai/v1/chat/completions", llm.openai_chat_completions, name="proxy-openai-chat"),
    path("openai/v1/responses", llm.openai_responses, name="proxy-openai-responses"),
    path("anthropic/v1/messages", llm.anthropic_messages, name="proxy-anthropic-messages"),
    re_path(
        r"^gemini/(?P<version>v1beta|v1)/models/(?P<model>[^/:]+):(?P<method>generateContent|streamGenerateContent)$",
        llm.gemini_generate,
        name="proxy-gemini",
    ),
]
