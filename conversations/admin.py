import json
from typing import Any

from django import forms
from django.contrib import admin, messages
from django.db import models
from django.db.models import QuerySet
from django.http import HttpRequest

from conversations.loop.splicing import TemplateError, check_template, templates_from_tokenizer_config
from conversations.models import (
    AuditEvent,
    Comparison,
    Conversation,
    Exchange,
    ModelProfile,
    RedactionRule,
    Step,
    Team,
    Turn,
)
from conversations.services import profile_probe


class ModelProfileForm(forms.ModelForm[ModelProfile]):
    """The profile's chat templates are compiled (sandboxed, nothing rendered) before they are
    saved: a template that does not compile is refused with its error and line
    (docs/chat-templates.md §2). An Ollama Go template is not Jinja and is kept as is."""

    # No Meta: the admin builds the form over all the model's fields (with its URL field options).
    tokenizer_config = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs={"rows": 4}),
        help_text="Optional: paste the model's tokenizer_config.json to take its chat templates "
        "(the default and the named ones, e.g. tool_use), special tokens and added tokens from it.",
    )

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        pasted = str(data.get("tokenizer_config") or "").strip()
        if pasted:
            self._take_tokenizer_config(pasted, data)
        source = str(data.get("chat_template_source") or "")
        go = "go template" in source.lower()
        template = data.get("chat_template") or ""
        if template.strip() and not go:
            try:
                check_template(template)
            except TemplateError as exc:
                self.add_error("chat_template", str(exc))
        named = data.get("chat_templates")
        if named is not None and not isinstance(named, dict):
            self.add_error("chat_templates", "a JSON object of template texts by name, e.g. tool_use")
        elif named and not go:
            for name, text in named.items():
                if not isinstance(text, str):
                    self.add_error("chat_templates", f"{name}: a template is a string")
                    continue
                try:
                    check_template(text)
                except TemplateError as exc:
                    self.add_error("chat_templates", f"{name}: {exc}")
        tokens = data.get("special_tokens")
        if tokens is not None and not (
            isinstance(tokens, dict) and all(isinstance(value, str) for value in tokens.values())
        ):
            self.add_error(
                "special_tokens",
                'a JSON object of token texts by name, e.g. {"bos_token": "<|begin_of_text|>"}',
            )
        added = data.get("added_tokens")
        if added is None:
            data["added_tokens"] = []
        elif not (isinstance(added, list) and all(isinstance(token, str) for token in added)):
            self.add_error("added_tokens", 'a JSON list of token texts, e.g. ["<tool_call>", "</tool_call>"]')
        return data

    def _take_tokenizer_config(self, pasted: str, data: dict[str, Any]) -> None:
        try:
            config = json.loads(pasted)
        except ValueError as exc:
            self.add_error("tokenizer_config", f"not JSON: {exc}")
            return
        found = templates_from_tokenizer_config(config) if isinstance(config, dict) else None
        if found is None:
            self.add_error("tokenizer_config", "no chat_template in this tokenizer config")
            return
        data["chat_template"] = found.template
        data["chat_templates"] = dict(found.named)
        data["special_tokens"] = dict(found.special_tokens)
        data["added_tokens"] = list(found.added_tokens)
        data["chat_template_source"] = found.source


@admin.register(ModelProfile)
class ModelProfileAdmin(admin.ModelAdmin[ModelProfile]):
    form = ModelProfileForm
    list_display = ("name", "provider", "model", "base_url", "api_key_env", "deadline_seconds", "is_demo")
    list_filter = ("provider", "is_demo")
    search_fields = ("name", "model", "base_url")
    formfield_overrides = {models.URLField: {"assume_scheme": "https"}}
    actions = ["probe"]

    @admin.action(description="Read chat template and tool support from the engine (llama.cpp, Ollama)")
    def probe(self, request: HttpRequest, queryset: QuerySet[ModelProfile]) -> None:
        for profile in queryset:
            for note in profile_probe(profile=profile):
                self.message_user(request, f"{profile.name}: {note}", messages.INFO)


class TurnInline(admin.TabularInline[Turn, Conversation]):
    model = Turn
    fields = ("seq", "question", "status", "answer", "created_at", "finished_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Conversation)
class ConversationAdmin(admin.ModelAdmin[Conversation]):
    list_display = ("title", "owner", "model_profile", "paradigm", "tool_choice", "created_at")
    list_filter = ("paradigm", "tool_choice", "model_profile")
    search_fields = ("title", "public_id", "owner__username")
    readonly_fields = ("public_id", "created_at")
    inlines = [TurnInline]


class StepInline(admin.TabularInline[Step, Turn]):
    model = Step
    fields = ("seq", "kind", "status", "title", "error", "started_at", "finished_at")
    readonly_fields = fields
    extra = 0
    can_delete = False
    show_change_link = True


@admin.register(Turn)
class TurnAdmin(admin.ModelAdmin[Turn]):
    list_display = ("conversation", "seq", "status", "paradigm", "tool_choice", "created_at")
    list_filter = ("status", "paradigm")
    readonly_fields = (
        "conversation",
        "seq",
        "tools",
        "transcript",
        "created_at",
        "started_at",
        "finished_at",
    )
    inlines = [StepInline]


class ExchangeInline(admin.StackedInline[Exchange, Step]):
    model = Exchange
    fields = (
        "seq",
        "channel",
        "direction",
        "label",
        "jsonrpc_id",
        "status",
        "duration_ms",
        "request_body",
        "response_body",
    )
    readonly_fields = fields
    extra = 0
    can_delete = False


@admin.register(Step)
class StepAdmin(admin.ModelAdmin[Step]):
    list_display = ("turn", "seq", "kind", "status", "title")
    list_filter = ("kind", "status")
    readonly_fields = ("turn", "parent", "seq", "started_at", "finished_at", "updated_at")
    inlines = [ExchangeInline]


@admin.register(Exchange)
class ExchangeAdmin(admin.ModelAdmin[Exchange]):
    """Raw exchanges are the audit record: readable here, never editable."""

    list_display = ("channel", "label", "server", "status", "duration_ms", "started_at")
    list_filter = ("channel", "status", "server")
    search_fields = ("label", "jsonrpc_id")

    def has_change_permission(self, request: object, obj: object = None) -> bool:
        return False

    def has_add_permission(self, request: object) -> bool:
        return False


@admin.register(Comparison)
class ComparisonAdmin(admin.ModelAdmin[Comparison]):
    list_display = ("question", "owner", "created_at")
    search_fields = ("question", "public_id", "owner__username")
    readonly_fields = ("public_id", "created_at")


@admin.register(RedactionRule)
class RedactionRuleAdmin(admin.ModelAdmin[RedactionRule]):
    """Patterns redacted from every record written after they are saved (the originals are not kept)."""

    list_display = ("name", "pattern", "enabled", "created_at")
    list_filter = ("enabled",)


@admin.register(Team)
class TeamAdmin(admin.ModelAdmin[Team]):
    """Members see and act on each other's things; viewers follow the members' read-only (a class:
    the lecturer a member, the students viewers)."""

    list_display = ("name",)
    filter_horizontal = ("members", "viewers")
    search_fields = ("name",)


@admin.register(AuditEvent)
class AuditEventAdmin(admin.ModelAdmin[AuditEvent]):
    """The audit log: who opened, exported, imported or pruned what, and who changed which MCP
    server (the entry's detail holds it before and after). Staff read it; no one edits it."""

    list_display = ("at", "actor_name", "action", "via", "subject", "conversation_public_id")
    list_filter = ("action", "via")
    search_fields = ("actor_name", "subject", "conversation_public_id")
    date_hierarchy = "at"

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False
