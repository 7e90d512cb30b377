"""Routes of the demo model; included under ``demo-model/v1/`` so it looks like an OpenAI base URL."""

from django.urls import path

from conversations import demo_model_views

urlpatterns = [
    path("chat/completions", demo_model_views.chat_completions, name="demo-model-chat-completions"),
    path("models", demo_model_views.models, name="demo-model-models"),
]
