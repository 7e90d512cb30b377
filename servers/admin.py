from django.contrib import admin
from django.db import models
from django.http import HttpRequest

from servers.models import McpServer


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin[McpServer]):
    list_display = ("name", "transport", "era", "enabled", "is_demo", "owner", "updated_at")
    list_filter = ("transport", "era", "enabled", "is_demo")
    search_fields = ("name", "description", "command", "url")
    readonly_fields = ("created_at", "updated_at")
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A stdio server runs a command on the worker: only staff may register or change one.
        return bool(request.user.is_staff) and super().has_add_permission(request)
