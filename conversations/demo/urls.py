"""Routes of the demo model, included at ``demo-model/``.

``v1/`` is both an OpenAI base URL (``/demo-model/v1``) and Anthropic's ``/v1``; ``v1beta/`` is
Gemini's (base URL ``/demo-model``).
"""

from django.urls import path, re_path

from conversations.demo import views

urlpatterns = [
    path("v1/chat/completions", views.chat_completions, name="demo-model-chat-completions"),
    path("v1/responses", views.responses, name="demo-model-responses"),
    path("v1/messages", views.messages, name="demo-model-messages"),
    path("v1/models", views.models, name="demo-model-models"),
    re_path(
        r"^v1beta/models/(?P<model>[^/:]+):generateContent$",
        views.generate_content,
        name="demo-model-gemini-generate",
    ),
    re_path(
        r"^v1beta/models/(?P<model>[^/:]+):streamGenerateContent$",
        views.stream_generate_content,
        name="demo-model-gemini-stream",
    ),
]
