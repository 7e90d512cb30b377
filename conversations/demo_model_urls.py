"""Routes of the demo model under ``demo-model/v1/``: an OpenAI base URL, and Anthropic's ``/v1``.

(The Gemini routes live in ``demo_model_gemini_urls``: their ``v1beta`` prefix is a sibling of
``v1``, so that module is included at ``demo-model/``.)
"""

from django.urls import path

from conversations import demo_model_views

urlpatterns = [
    path("chat/completions", demo_model_views.chat_completions, name="demo-model-chat-completions"),
    path("responses", demo_model_views.responses, name="demo-model-responses"),
    path("messages", demo_model_views.messages, name="demo-model-messages"),
    path("models", demo_model_views.models, name="demo-model-models"),
]
