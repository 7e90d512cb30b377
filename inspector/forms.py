"""Forms of the inspection UI: start a conversation, ask a follow-up question, start a comparison."""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from django import forms

from conversations import selectors
from conversations.models import TOOL_CHOICE_MODES, ModelProfile
from conversations.paradigms import PARADIGMS
from servers.models import McpServer

QUESTION_MAX_CHARS = 10_000
# Every run is a full agent turn; a comparison wider than this is unreadable side by side anyway.
COMPARISON_MAX_RUNS = 12

# One line per paradigm for people choosing one; a paradigm without a line here shows its
# class docstring's first line instead.
PARADIGM_EXPLANATIONS = {
    "native": "the provider's tools field and tool_choice; the model returns typed tool_calls",
    "prompt_xml": "tools listed in the system prompt; the model writes <function_calls> XML, parsed tolerantly",
    "prompt_json": 'tools listed in the system prompt; the model writes {"tool": …, "arguments": …} or plain text',
    "structured": "response_format json_schema: a union of “call tool X with these arguments” and “final answer”",
    "intent": "call 1 classifies the question to one tool (or none), call 2 fills that tool's arguments",
    "auto": "the best paradigm the model supports (native → structured → prompt_xml), downgrading when refused",
}


def paradigm_explanation(key: str) -> str:
    """One line on what the paradigm sends and parses."""
    if key in PARADIGM_EXPLANATIONS:
        return PARADIGM_EXPLANATIONS[key]
    doc = (PARADIGMS[key].__doc__ or "").strip()
    return doc.splitlines()[0] if doc else ""


def paradigm_choices() -> list[tuple[str, str]]:
    """Every registered paradigm, labelled with its one-line explanation."""
    return [(key, f"{paradigm.label} — {paradigm_explanation(key)}") for key, paradigm in PARADIGMS.items()]


if TYPE_CHECKING:
    _ProfileFieldBase = forms.ModelChoiceField[ModelProfile]
    _ProfilesFieldBase = forms.ModelMultipleChoiceField[ModelProfile]
    _ServerFieldBase = forms.ModelMultipleChoiceField[McpServer]
else:  # the form field classes are not subscriptable at run time
    _ProfileFieldBase = forms.ModelChoiceField
    _ProfilesFieldBase = forms.ModelMultipleChoiceField
    _ServerFieldBase = forms.ModelMultipleChoiceField


def _profile_label(profile: ModelProfile) -> str:
    # The demo model must never pass for a real one.
    label = f"{profile.name} · {profile.model}"
    return f"{label} (demo)" if profile.is_demo else label


class _ProfileChoiceField(_ProfileFieldBase):
    def label_from_instance(self, obj: ModelProfile) -> str:
        return _profile_label(obj)


class _ProfilesChoiceField(_ProfilesFieldBase):
    def label_from_instance(self, obj: ModelProfile) -> str:
        return _profile_label(obj)


class _ServerChoiceField(_ServerFieldBase):
    def label_from_instance(self, obj: McpServer) -> str:
        label = f"{obj.name} — {obj.description}" if obj.description else obj.name
        return f"{label} (demo)" if obj.is_demo else label


def _question_field(placeholder: str) -> forms.CharField:
    return forms.CharField(
        max_length=QUESTION_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": placeholder}),
    )


class _ToolChoiceForm(forms.Form):
    """tool_choice, its tool name and the MCP servers: shared by conversations and comparisons."""

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


class ConversationForm(_ToolChoiceForm):
    """A new conversation: model, paradigm, tool_choice, servers and the first question."""

    model_profile = _ProfileChoiceField(
        queryset=selectors.profiles_for_form(), empty_label=None, label="Model"
    )
    paradigm = forms.ChoiceField(choices=paradigm_choices, initial="native", widget=forms.RadioSelect)
    question = _question_field("What is the weather in Paris tomorrow?")

    field_order = ["model_profile", "paradigm", "tool_choice", "tool_choice_name", "servers", "question"]


def _looks_like_server_tool(name: str) -> bool:
    server, slash, tool = name.partition("/")
    return bool(server and slash and tool)


class ComparisonForm(_ToolChoiceForm):
    """One question under every chosen (model profile × paradigm) pair: at least two runs."""

    question = _question_field("What will the weather be like in Beijing tomorrow?")
    model_profiles = _ProfilesChoiceField(
        queryset=selectors.profiles_for_form(), widget=forms.CheckboxSelectMultiple, label="Models"
    )
    paradigms = forms.MultipleChoiceField(
        choices=paradigm_choices, widget=forms.CheckboxSelectMultiple, label="Paradigms"
    )

    field_order = ["question", "model_profiles", "paradigms", "tool_choice", "tool_choice_name", "servers"]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            profiles = selectors.profiles_for_form()
            self.initial.setdefault("model_profiles", [p.pk for p in profiles if p.is_demo])
            self.initial.setdefault("paradigms", list(PARADIGMS))

    def clean(self) -> dict[str, Any]:
        """Every model × every paradigm: between two and ``COMPARISON_MAX_RUNS`` runs."""
        cleaned = super().clean()
        profiles = cleaned.get("model_profiles")
        paradigms = cleaned.get("paradigms")
        if not profiles or not paradigms:
            return cleaned  # the field errors say what is missing
        count = len(profiles) * len(paradigms)
        if count < 2:
            self.add_error(
                None, "A comparison needs at least two runs: choose two or more paradigms, or models."
            )
        elif count > COMPARISON_MAX_RUNS:
            self.add_error(
                None,
                f"{len(profiles)} models × {len(paradigms)} paradigms make {count} runs; "
                f"at most {COMPARISON_MAX_RUNS} fit side by side.",
            )
        return cleaned

    def runs(self) -> list[tuple[ModelProfile, str]]:
        """The (model profile, paradigm key) pairs to run, models first, in registry order."""
        chosen = set(self.cleaned_data["paradigms"])
        keys = [key for key in PARADIGMS if key in chosen]
        return [(profile, key) for profile in self.cleaned_data["model_profiles"] for key in keys]


class QuestionForm(forms.Form):
    """A follow-up question in an existing conversation."""

    question = _question_field("And in Fahrenheit?")
