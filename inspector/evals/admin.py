"""Eval suites and runs in the Django admin, read-only: a suite is changed through its text (the
pages, the API or the ``eval`` command), where it is validated; a run is a record."""

from django.contrib import admin
from django.http import HttpRequest

from inspector.evals.models import EvalRun, Suite


class _ReadOnly:
    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


@admin.register(Suite)
class SuiteAdmin(_ReadOnly, admin.ModelAdmin[Suite]):
    list_display = ("name", "owner", "updated_at")
    search_fields = ("name",)


@admin.register(EvalRun)
class EvalRunAdmin(_ReadOnly, admin.ModelAdmin[EvalRun]):
    list_display = ("public_id", "suite", "owner", "status", "finished", "total", "created_at")
    list_filter = ("status",)
