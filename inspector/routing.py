from django.urls import path

from inspector.consumers import ConversationConsumer

websocket_urlpatterns = [
    path("ws/conversations/<uuid:public_id>/", ConversationConsumer.as_asgi()),
]
