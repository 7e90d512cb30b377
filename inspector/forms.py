"""Forms of the inspection UI: start a conversation, ask a follow-up question."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms

from conversations import selectors
from conversations.models import TOOL_CHOICE_MODES, ModelProfile
from conversations.paradigms import PARADIGMS
from servers.models import McpServer

QUESTION_MAX_CHARS = 10_000


if TYPE_CHECKING:
    _ProfileFieldBase = forms.ModelChoiceField[ModelProfile]
    _ServerFieldBase = forms.ModelMultipleChoiceField[McpServer]
else:  # the form field classes are not subscriptable at run time
    _ProfileFieldBase = forms.ModelChoiceField
    _ServerFieldBase = forms.ModelMultipleChoiceField


class _ProfileChoiceField(_ProfileFieldBase):
    def label_from_instance(self, obj: ModelProfile) -> str:
        # The demo model must never pass for a real one.
        label = f"{obj.name} · {obj.model}"
        return f"{label} (demo)" if obj.is_demo else label


class _ServerChoiceField(_ServerFieldBase):
    def label_from_instance(self, obj: McpServer) -> str:
        label = f"{obj.name} — {obj.description}" if obj.description else obj.name
        return f"{label} (demo)" if obj.is_demo else label


def _question_field(placeholder: str) -> forms.CharField:
    return forms.CharField(
        max_length=QUESTION_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": placeholder}),
    )


class ConversationForm(forms.Form):
    """A new conversation: model, paradigm, tool_choice, servers and the first question."""

    model_profile = _ProfileChoiceField(
        queryset=selectors.profiles_for_form(), empty_label=None, label="Model"
    )
    paradigm = forms.ChoiceField(choices=[(key, p.label) for key, p in PARADIGMS.items()], initial="native")
    tool_choice = forms.ChoiceField(choices=TOOL_CHOICE_MODES, initial="auto", label="tool_choice")
    tool_choice_name = forms.CharField(
        max_length=200,
        required=False,
        label="Named tool",
        help_text="With tool_choice “named”: the MCP tool as server/tool, e.g. demo/get_forecast.",
        widget=forms.TextInput(attrs={"placeholder": "server/tool"}),
    )
    servers = _ServerChoiceField(
        queryset=selectors.servers_for_form(),
        required=False,
        widget=forms.CheckboxSelectMultiple,
        label="MCP servers",
    )
    question = _question_field("What is the weather in Paris tomorrow?")

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            # The bundled demo server is ticked, so a first question just works.
            self.initial.setdefault("servers", [s.pk for s in selectors.servers_for_form() if s.is_demo])

    def clean(self) -> dict[str, Any]:
        """A tool name only with tool_choice "named", where it is required and on a chosen server."""
        cleaned = super().clean() or {}
        if cleaned.get("tool_choice") != "named":
            cleaned["tool_choice_name"] = ""
            return cleaned
        name = cleaned.get("tool_choice_name", "")
        if not name:
            self.add_error("tool_choice_name", "tool_choice “named” needs the tool, as server/tool.")
            return cleaned
        if not _looks_like_server_tool(name):
            self.add_error("tool_choice_name", "Write the tool as server/tool, e.g. demo/get_forecast.")
            return cleaned
        server_name = name.partition("/")[0]
        selected = {server.name for server in cleaned.get("servers") or []}
        if server_name not in selected:
            self.add_error(
                "tool_choice_name", f"The server “{server_name}” is not among the selected servers."
            )
        return cleaned


def _looks_like_server_tool(name: str) -> bool:
    server, slash, tool = name.partition("/")
    return bool(server and slash and tool)


class QuestionForm(forms.Form):
    """A follow-up question in an existing conversation."""

    question = _question_field("And in Fahrenheit?")
