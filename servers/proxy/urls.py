"""Included under ``proxy/<str:key>/`` by inspector/urls.py (beside the LLM proxy's routes)."""

from django.urls import path

from servers.proxy import views

urlpatterns = [
    path("mcp/<str:server>", views.mcp, name="proxy-mcp"),
    path("sse/<str:server>", views.sse, name="proxy-sse"),
    path("sse/<str:server>/messages", views.sse_messages, name="proxy-sse-messages"),
]
