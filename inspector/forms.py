"""Forms of the inspection UI: start a conversation, ask a follow-up question, start a comparison,
find conversations, upload a transcript."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib.auth.base_user import AbstractBaseUser
from django.core.files.uploadedfile import UploadedFile
from django.template.defaultfilters import filesizeformat

from conversations import selectors
from conversations.loop.paradigms import PARADIGMS
from conversations.models import TOOL_CHOICE_MODES, ModelProfile, Turn
from conversations.selectors.scopes import SCOPES
from conversations.services import DEMO_PROFILE_NAME
from servers import demo_server
from servers.models import McpServer, Operation
from servers.selectors import server_listing, server_spawn_refusal, servers_for_form

QUESTION_MAX_CHARS = 10_000
# Bigger transcripts go through `manage.py import`, which streams no request body.
TRANSCRIPT_UPLOAD_MAX_BYTES = 20 * 1024 * 1024
# Every run is a full agent turn; a comparison wider than this is unreadable side by side anyway.
COMPARISON_MAX_RUNS = 12
# How many of the user's newest turns are read for the tools each server offers.
KNOWN_TOOLS_TURNS = 20

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


class _ServerCheckboxes(forms.CheckboxSelectMultiple):
    """Checkboxes of servers; a server the user may not start (``refused``: pk → why) is shown
    disabled, with the reason after its label."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.refused: dict[str, str] = {}

    def create_option(
        self,
        name: str,
        value: Any,
        label: Any,
        selected: bool,
        index: int,
        subindex: int | None = None,
        attrs: dict[str, Any] | None = None,
    ) -> dict[str, Any]:
        option = super().create_option(name, value, label, selected, index, subindex, attrs)
        reason = self.refused.get(str(value))
        if reason:
            option["attrs"]["disabled"] = True
            option["label"] = f"{label} — not available to you: {reason}"
        return option


def _question_field(placeholder: str) -> forms.CharField:
    return forms.CharField(
        max_length=QUESTION_MAX_CHARS,
        widget=forms.Textarea(attrs={"rows": 3, "placeholder": placeholder}),
    )


# The demo model's scenarios (conversations/demo/scenarios.py MARKERS): the switch, a name and a
# sentence for people choosing one. The chosen switch is added to the question.
SCENARIOS: list[tuple[str, str, str]] = [
    (
        "[demo:malformed-json]",
        "Malformed JSON",
        "the first tool call's arguments are cut short; watch the tolerant parser and the repair",
    ),
    (
        "[demo:unknown-tool]",
        "Unknown tool",
        "the first call names a tool that was not offered; the host refuses it and the model repairs",
    ),
    (
        "[demo:missing-argument]",
        "Missing argument",
        "the first call leaves out a required argument; the inputSchema check sends the error back",
    ),
    (
        "[demo:code-fence]",
        "Code fence",
        "the call comes wrapped in a ```json / ```xml fence, as chat models often write it",
    ),
    (
        "[demo:no-native-tools]",
        "No native tools",
        "the provider refuses the tools field (400), as Ollama does; Auto falls back to structured output",
    ),
    (
        "[demo:no-structured]",
        "No structured output",
        "the provider refuses a json_schema response_format (400): the structured paradigm fails; with no native tools too, Auto falls back to XML in the prompt",
    ),
    (
        "[demo:http-500]",
        "HTTP 500",
        "every model request fails with a server error; the turn records it and stays usable",
    ),
    (
        "[demo:drip=0.4]",
        "Slow streaming",
        "with a streaming profile, each event waits 0.4 s, so the reply visibly grows",
    ),
    ("[demo:slow=3]", "Slow answer", "the model waits 3 s before answering"),
    ("[demo:no-tool]", "No tool", "the model answers in text even when a tool fits"),
]


def scenario_choices() -> list[tuple[str, str]]:
    return [("", "None — the demo model behaves")] + [
        (marker, f"{name} — {sentence}") for marker, name, sentence in SCENARIOS
    ]


def _scenario_field() -> forms.ChoiceField:
    return forms.ChoiceField(
        choices=scenario_choices,
        required=False,
        initial="",
        label="Demo scenario",
        help_text="The demo model misbehaves on purpose, so a class can watch the parser, the validator, "
        "the repair loop and the fallbacks work. It adds the switch to the question (it can be typed "
        "there too); only the demo model reacts to it.",
        widget=forms.RadioSelect(attrs={"class": "scenario-choices"}),
    )


def _with_scenario(form: forms.Form, cleaned: dict[str, Any], profiles: list[ModelProfile]) -> None:
    """Add the chosen scenario's switch to the question; refuse it when no chosen model is the demo."""
    marker = cleaned.get("scenario") or ""
    question = cleaned.get("question")
    if not marker or not question:
        return
    if profiles and not any(profile.is_demo for profile in profiles):
        form.add_error("scenario", "Scenarios are the demo model's: choose the demo model, or no scenario.")
        return
    if marker not in question:
        cleaned["question"] = f"{question} {marker}"


def _known_tools(user: AbstractBaseUser) -> dict[str, list[str]]:
    """The tools each server is known to offer, as the user has seen them: the newest turn of the
    user's conversations that listed it, else the newest tools/list on the workbench, else (the
    bundled demo server, for a new account) its fixed catalogue."""
    known: dict[str, list[str]] = {}
    turns = (
        Turn.objects.filter(conversation__in=selectors.conversation_list(user=user))
        .exclude(tools=[])
        .order_by("-created_at")
        .values_list("tools", flat=True)[:KNOWN_TOOLS_TURNS]
    )
    for tools in turns:
        seen: dict[str, list[str]] = {}
        for tool in tools if isinstance(tools, list) else []:
            if isinstance(tool, dict) and tool.get("server") and tool.get("name"):
                seen.setdefault(str(tool["server"]), []).append(str(tool["name"]))
        for server, names in seen.items():
            known.setdefault(server, names)
    for mcp_server in servers_for_form():
        if mcp_server.name not in known:
            listing = server_listing(server=mcp_server, kind=Operation.Kind.TOOLS_LIST, user=user)
            names = [
                str(item["name"]) for item in listing.items if isinstance(item, dict) and item.get("name")
            ]
            if not names and mcp_server.is_demo:
                names = list(demo_server.tool_names())  # the bundled catalogue is fixed
            if names:
                known[mcp_server.name] = names
    return known


# A tool the bundled demo server offers: the example a hint gives (it must exist).
NAMED_EXAMPLE = "demo/get_weather_forecast"


class _ToolChoiceForm(forms.Form):
    """tool_choice, its tool name and the MCP servers: shared by conversations and comparisons."""

    tool_choice = forms.ChoiceField(choices=TOOL_CHOICE_MODES, initial="auto", label="tool_choice")
    tool_choice_name = forms.CharField(
        max_length=200,
        required=False,
        label="Named tool",
        help_text="With tool_choice “named”: the one tool the model must call, as server/tool.",
        widget=forms.TextInput(attrs={"placeholder": f"server/tool, e.g. {NAMED_EXAMPLE}"}),
    )
    servers = _ServerChoiceField(
        queryset=servers_for_form(),
        required=False,
        widget=_ServerCheckboxes,
        label="MCP servers",
    )

    def __init__(self, *args: Any, user: AbstractBaseUser, **kwargs: Any) -> None:
        """``user``: who fills the form in; a stdio server they may not start
        (``servers.selectors.server_spawn_refusal``) is shown disabled and refused."""
        super().__init__(*args, **kwargs)
        self.user = user
        offered = list(servers_for_form())
        self.refused = {
            server.pk: reason
            for server in offered
            if (reason := server_spawn_refusal(server=server, user=user))
        }
        widget = self.fields["servers"].widget
        assert isinstance(widget, _ServerCheckboxes)
        widget.refused = {str(pk): reason for pk, reason in self.refused.items()}
        self.known_tools = _known_tools(user)
        if self.known_tools:
            # "named" picks one of the tools the servers are known to offer.
            self.fields["tool_choice_name"].widget = forms.Select(
                choices=[("", "— choose the tool —")]
                + [
                    (server, [(f"{server}/{name}", f"{server}/{name}") for name in names])
                    for server, names in sorted(self.known_tools.items())
                ]
            )
            self.fields["tool_choice_name"].help_text = (
                "With tool_choice “named”: the one tool the model must call, among the tools the "
                "servers offered last time."
            )
        if not self.is_bound:
            # The bundled demo server is ticked, so a first question just works.
            self.initial.setdefault(
                "servers", [s.pk for s in offered if s.is_demo and s.pk not in self.refused]
            )

    def clean_servers(self) -> list[McpServer]:
        """The chosen servers, none of which the user may not start (a disabled box can still be
        posted)."""
        servers = list(self.cleaned_data.get("servers") or [])
        refusals = [self.refused[server.pk] for server in servers if server.pk in self.refused]
        if refusals:
            raise forms.ValidationError(refusals)
        return servers

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
            self.add_error("tool_choice_name", f"Write the tool as server/tool, e.g. {NAMED_EXAMPLE}.")
            return cleaned
        server_name, _, tool = name.partition("/")
        selected = {server.name for server in cleaned.get("servers") or []}
        if server_name not in selected:
            self.add_error(
                "tool_choice_name", f"The server “{server_name}” is not among the selected servers."
            )
        elif server_name in self.known_tools and tool not in self.known_tools[server_name]:
            offered = ", ".join(self.known_tools[server_name])
            self.add_error(
                "tool_choice_name", f"{server_name} offers no tool “{tool}” (it offers {offered})."
            )
        return cleaned


class ConversationForm(_ToolChoiceForm):
    """A new conversation: model, paradigm, tool_choice, servers and the first question."""

    model_profile = _ProfileChoiceField(
        queryset=selectors.profiles_for_form(), empty_label=None, label="Model"
    )
    paradigm = forms.ChoiceField(choices=paradigm_choices, initial="native", widget=forms.RadioSelect)
    question = _question_field("What is the weather in Paris tomorrow?")
    scenario = _scenario_field()

    field_order = [
        "model_profile",
        "paradigm",
        "tool_choice",
        "tool_choice_name",
        "servers",
        "question",
        "scenario",
    ]

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean()
        profile = cleaned.get("model_profile")
        _with_scenario(self, cleaned, [profile] if profile is not None else [])
        return cleaned


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

    scenario = _scenario_field()

    field_order = [
        "question",
        "scenario",
        "model_profiles",
        "paradigms",
        "tool_choice",
        "tool_choice_name",
        "servers",
    ]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if not self.is_bound:
            # The demo model (in its OpenAI Chat format) under every paradigm; its other wire-format
            # profiles are there to tick (every one of them at once would be too many runs).
            profiles = selectors.profiles_for_form().filter(name=DEMO_PROFILE_NAME)
            self.initial.setdefault("model_profiles", [p.pk for p in profiles])
            self.initial.setdefault("paradigms", list(PARADIGMS))

    def clean(self) -> dict[str, Any]:
        """Every model × every paradigm: between two and ``COMPARISON_MAX_RUNS`` runs."""
        cleaned = super().clean()
        profiles = cleaned.get("model_profiles")
        paradigms = cleaned.get("paradigms")
        if not profiles or not paradigms:
            return cleaned  # the field errors say what is missing
        _with_scenario(self, cleaned, list(profiles))
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


ANY = [("", "any")]


def _model_profile_choices() -> list[tuple[str, str]]:
    return ANY + [(profile.name, _profile_label(profile)) for profile in selectors.profiles_for_form()]


def _text(placeholder: str, *, label: str, input_type: str = "text") -> forms.CharField:
    return forms.CharField(
        required=False,
        max_length=200,
        label=label,
        widget=forms.TextInput(attrs={"placeholder": placeholder, "type": input_type}),
    )


def _date(label: str) -> forms.DateField:
    return forms.DateField(required=False, label=label, widget=forms.DateInput(attrs={"type": "date"}))


@dataclass(frozen=True)
class SortColumn:
    """A sortable column head: the ``sort`` its link asks for, and an arrow if it is the current one."""

    key: str
    arrow: str


# The list's sortable columns: (descending key, ascending key) per column.
SORT_COLUMNS = {
    "started": ("-created", "created"),
    "duration": ("-duration", "duration"),
    "tokens": ("-tokens", "tokens"),
}


class ConversationFilterForm(forms.Form):
    """The conversation list's filters (GET): each empty field filters nothing."""

    q = _text("words asked, answered, called or returned", label="Text", input_type="search")
    scope = forms.MultipleChoiceField(
        choices=list(SCOPES.items()),
        required=False,
        label="Search in",
        widget=forms.CheckboxSelectMultiple,
        help_text="none ticked: questions, answers, tool calls and results",
    )
    server = _text("e.g. demo", label="Server")
    tool = _text("e.g. get_weather_forecast", label="Tool called")
    model_profile = forms.ChoiceField(choices=_model_profile_choices, required=False, label="Model")
    paradigm = forms.ChoiceField(
        choices=ANY + [(key, paradigm.label) for key, paradigm in PARADIGMS.items()],
        required=False,
        label="Paradigm",
    )
    status = forms.ChoiceField(
        choices=ANY + list(Turn.Status.choices),
        required=False,
        label="Status",
        help_text="of the latest turn",
    )
    error = forms.ChoiceField(
        choices=ANY + [(key, error.label) for key, error in selectors.ERROR_CLASSES.items()],
        required=False,
        label="Error",
        help_text="in any turn",
    )
    owner = _text("username", label="Owner")
    created_from = _date("Started from")
    created_to = _date("Started until")
    sort = forms.ChoiceField(
        choices=[(key, sort.label) for key, sort in selectors.SORTS.items()],
        required=False,
        widget=forms.HiddenInput,
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        start, end = cleaned.get("created_from"), cleaned.get("created_to")
        if start and end and start > end:
            self.add_error("created_to", "The end date is before the start date.")
        return cleaned

    def filters(self) -> selectors.ConversationFilters:
        """The valid fields as filters (call after ``is_valid()``; an invalid field filters nothing)."""
        data = getattr(self, "cleaned_data", {})
        return selectors.ConversationFilters(
            q=data.get("q") or "",
            scope=tuple(data.get("scope") or ()),
            server=data.get("server") or "",
            tool=data.get("tool") or "",
            model_profile=data.get("model_profile") or "",
            paradigm=data.get("paradigm") or "",
            status=data.get("status") or "",
            error=data.get("error") or "",
            owner=data.get("owner") or "",
            created_from=data.get("created_from"),
            created_to=data.get("created_to"),
            sort=data.get("sort") or selectors.DEFAULT_SORT,
        )

    @property
    def active(self) -> bool:
        """Whether any filter (not the sort) is set."""
        return any(value for name, value in getattr(self, "cleaned_data", {}).items() if name != "sort")

    def sort_columns(self) -> dict[str, SortColumn]:
        """Per sortable column: the link flips the current order, or starts with the largest first."""
        current = self.filters().sort
        columns = {}
        for name, (descending, ascending) in SORT_COLUMNS.items():
            if current == descending:
                columns[name] = SortColumn(key=ascending, arrow="↓")
            elif current == ascending:
                columns[name] = SortColumn(key=descending, arrow="↑")
            else:
                columns[name] = SortColumn(key=descending, arrow="")
        return columns


class TranscriptUploadForm(forms.Form):
    """A ``json`` transcript exported by this or another installation, or OpenTelemetry traces
    (OTLP/JSON or OTLP/protobuf), to import read-only."""

    transcript = forms.FileField(
        label="Transcript file",
        help_text="A JSON transcript from “Download → JSON” or `manage.py export --format json`, "
        "or OpenTelemetry traces (OTLP/JSON or OTLP/protobuf, from this app or any instrumented app).",
        widget=forms.ClearableFileInput(
            attrs={"accept": ".json,.pb,application/json,application/x-protobuf"}
        ),
    )

    def clean_transcript(self) -> UploadedFile[bytes]:
        upload: UploadedFile[bytes] = self.cleaned_data["transcript"]
        if upload.size is not None and upload.size > TRANSCRIPT_UPLOAD_MAX_BYTES:
            raise forms.ValidationError(
                f"The file is {filesizeformat(upload.size)}; at most "
                f"{filesizeformat(TRANSCRIPT_UPLOAD_MAX_BYTES)} can be uploaded here "
                "(`manage.py import FILE` takes bigger transcripts)."
            )
        return upload


class ProviderComparisonForm(forms.Form):
    """One question under the demo model in every provider wire format."""

    question = _question_field("What will the weather be like in Beijing tomorrow?")
    question.initial = "What will the weather be like in Beijing tomorrow?"
    stream = forms.BooleanField(required=False, label="Stream the replies")


class PriceForm(forms.Form):
    """A model profile's prices in US dollars per million tokens; both empty: unknown."""

    profile = forms.IntegerField(widget=forms.HiddenInput)
    input_per_million = forms.DecimalField(
        required=False, min_value=0, max_digits=10, decimal_places=4, label="input $ / 1M tokens"
    )
    output_per_million = forms.DecimalField(
        required=False, min_value=0, max_digits=10, decimal_places=4, label="output $ / 1M tokens"
    )
    source = forms.CharField(
        required=False,
        max_length=200,
        label="source",
        help_text="Where these prices come from (a price page, a date).",
    )

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        given = [cleaned.get("input_per_million") is not None, cleaned.get("output_per_million") is not None]
        if any(given) and not all(given):
            raise forms.ValidationError("Give both prices, or neither (unknown).")
        if all(given) and not cleaned.get("source"):
            self.add_error("source", "Name where the prices come from.")
        return cleaned


class ProxyKeyForm(forms.Form):
    """A new proxy key: its name, the upstream of each model format, and optionally the model
    profile whose chat template splices its Chat Completions calls."""

    name = forms.CharField(max_length=80, required=False)
    openai_upstream = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="https",
        label="OpenAI upstream",
        help_text="e.g. https://api.openai.com/v1",
    )
    anthropic_upstream = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="https",
        label="Anthropic upstream",
        help_text="e.g. https://api.anthropic.com",
    )
    gemini_upstream = forms.URLField(
        max_length=500,
        required=False,
        assume_scheme="https",
        label="Gemini upstream",
        help_text="e.g. https://generativelanguage.googleapis.com",
    )
    profile = forms.ModelChoiceField(
        queryset=ModelProfile.objects.filter(imported_by__isnull=True)
        .exclude(chat_template="")
        .order_by("name"),
        required=False,
        label="Chat template from",
        help_text="A model profile with the upstream model's chat template: its calls get their exact spliced prompt.",
    )
