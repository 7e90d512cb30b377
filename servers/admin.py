from typing import Any

from django.contrib import admin
from django.contrib.auth.base_user import AbstractBaseUser
from django.db import models
from django.db.models import QuerySet
from django.forms import ModelForm
from django.http import HttpRequest

from servers import services
from servers.models import McpServer


def _actor(request: HttpRequest) -> AbstractBaseUser | None:
    return request.user if isinstance(request.user, AbstractBaseUser) else None


@admin.register(McpServer)
class McpServerAdmin(admin.ModelAdmin[McpServer]):
    """Every save and delete goes through the registry's services, so the audit log has it."""

    list_display = (
        "name",
        "transport",
        "era",
        "enabled",
        "allow_non_staff_spawn",
        "is_demo",
        "owner",
        "updated_at",
    )
    list_filter = ("transport", "era", "enabled", "allow_non_staff_spawn", "is_demo")
    search_fields = ("name", "description", "command", "url")
    readonly_fields = ("created_at", "updated_at")
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}

    def has_add_permission(self, request: HttpRequest) -> bool:
        # A stdio server runs a command on the worker: only staff may register or change one.
        return bool(request.user.is_staff) and super().has_add_permission(request)

    def save_model(self, request: HttpRequest, obj: McpServer, form: ModelForm[Any], change: bool) -> None:
        if not change and obj.owner_id is None:
            obj.owner = _actor(request)  # type: ignore[assignment]
        services.server_commit(server=obj, actor=_actor(request), via="admin")

    def delete_model(self, request: HttpRequest, obj: McpServer) -> None:
        services.server_delete(server=obj, actor=_actor(request), via="admin")

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[McpServer]) -> None:
        for server in queryset:
            services.server_delete(server=server, actor=_actor(request), via="admin")
