from typing import Any

from django.urls import path

from inspector.consumers import ConversationConsumer

# Channels routes ASGI apps with Django's path(); the stubs only know view callables.
websocket_urlpatterns: list[Any] = [
    path("ws/conversations/<uuid:public_id>/", ConversationConsumer.as_asgi()),  # type: ignore[arg-type]
]
