"""Forms of the server registry and the workbench.

Env and headers are edited as lines of text; secret entries have their own fields, shown masked
and kept when left masked. Tool arguments are one JSON object (the page's schema-generated form
writes it), validated against the tool's inputSchema before anything is sent.
"""

from __future__ import annotations

import json
import re
from datetime import date, datetime
from typing import Any

import jsonschema
from django import forms

from conversations.loop.wire import MASK
from conversations.models import ModelProfile
from servers.gateway.config import ERAS, has_references
from servers.gateway.transports import TRANSPORTS
from servers.models import McpServer, server_name_validator
from servers.vault import is_sealed

LINES_WIDGET = {"rows": 3, "spellcheck": "false", "autocomplete": "off"}


def _pairs(text: str, separator: str, field: str) -> dict[str, str]:
    pairs: dict[str, str] = {}
    for number, line in enumerate(text.splitlines(), start=1):
        if not line.strip():
            continue
        name, found, value = line.partition(separator)
        if not found or not name.strip():
            raise forms.ValidationError(f"line {number}: write NAME{separator}value")
        pairs[name.strip()] = value.strip() if separator == ":" else value
    return pairs


def _lines(pairs: dict[str, Any], separator: str, *, secret: bool) -> str:
    """Stored pairs as editable lines: the plain ones, or the secret ones masked."""
    lines = []
    for name, value in pairs.items():
        text = str(value)
        is_secret = is_sealed(text) or has_references(text)
        if is_secret == secret:
            shown = MASK if is_sealed(text) else text
            lines.append(f"{name}{separator}{' ' if separator == ':' else ''}{shown}")
    return "\n".join(lines)


class ServerForm(forms.Form):
    name = forms.CharField(max_length=40, validators=[server_name_validator])
    description = forms.CharField(max_length=300, required=False)
    transport = forms.ChoiceField(choices=[(key, t.label) for key, t in TRANSPORTS.items()])
    command = forms.CharField(max_length=500, required=False, help_text="stdio: the executable to launch.")
    args = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs=LINES_WIDGET),
        help_text="stdio: one argument per line.",
    )
    cwd = forms.CharField(max_length=500, required=False, label="Working directory")
    env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs=LINES_WIDGET),
        label="Environment",
        help_text="stdio: NAME=value per line. Names that look like credentials (TOKEN, KEY, SECRET, "
        "PASSWORD…) are stored encrypted.",
    )
    secret_env = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs=LINES_WIDGET),
        label="Secret environment",
        help_text=f"NAME=value, stored encrypted and shown as {MASK}; leave {MASK} to keep a value; "
        "or NAME=${VAR} to read it from the worker's environment.",
    )
    url = forms.URLField(max_length=500, required=False, assume_scheme="https", label="URL")
    headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs=LINES_WIDGET),
        help_text="HTTP: Name: value per line (Authorization and other credentials are stored encrypted).",
    )
    secret_headers = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs=LINES_WIDGET),
        label="Secret headers",
        help_text=f"Name: value, stored encrypted and shown as {MASK}; or Name: ${{VAR}}.",
    )
    era = forms.ChoiceField(choices=list(ERAS.items()), label="Protocol era")
    call_timeout = forms.FloatField(min_value=1, max_value=3600, initial=30.0, label="Call timeout (s)")
    roots = forms.CharField(
        required=False,
        widget=forms.Textarea(attrs=LINES_WIDGET),
        help_text="Offered when the server asks for roots: one URI per line, optionally followed by a name.",
    )
    sampling_profile = forms.ModelChoiceField(
        queryset=ModelProfile.objects.filter(imported_by__isnull=True).order_by("name"),
        required=False,
        label="Sampling model",
        help_text="Answers the server's sampling requests; empty: sampling is not offered.",
    )
    sampling_review = forms.BooleanField(
        required=False,
        initial=False,
        label="Review sampling requests",
        help_text="Show each sampling request before the model is called: you may edit it, approve "
        "or refuse it (refused, or not reviewed in time: the server hears 'User rejected').",
    )
    elicitation = forms.BooleanField(
        required=False, initial=True, help_text="Let the server ask you for input."
    )
    enabled = forms.BooleanField(required=False, initial=True)
    allow_non_staff_spawn = forms.BooleanField(
        required=False,
        initial=False,
        label="Allow non-staff to spawn",
        help_text="stdio: let users without staff rights start this server's process (workbench calls, "
        "conversations). Off: only staff may.",
    )

    def __init__(self, *args: Any, instance: McpServer | None = None, **kwargs: Any) -> None:
        if instance is not None and "initial" not in kwargs:
            kwargs["initial"] = self.initial_for(instance)
        super().__init__(*args, **kwargs)
        self.instance = instance

    @staticmethod
    def initial_for(server: McpServer) -> dict[str, Any]:
        return {
            "name": server.name,
            "description": server.description,
            "transport": server.transport,
            "command": server.command,
            "args": "\n".join(str(a) for a in server.args),
            "cwd": server.cwd,
            "env": _lines(server.env, "=", secret=False),
            "secret_env": _lines(server.env, "=", secret=True),
            "url": server.url,
            "headers": _lines(server.headers, ":", secret=False),
            "secret_headers": _lines(server.headers, ":", secret=True),
            "era": server.era,
            "call_timeout": server.call_timeout,
            "roots": "\n".join(f"{r.get('uri', '')} {r.get('name', '')}".strip() for r in server.roots),
            "sampling_profile": server.sampling_profile,
            "sampling_review": server.sampling_review,
            "elicitation": server.elicitation,
            "enabled": server.enabled,
            "allow_non_staff_spawn": server.allow_non_staff_spawn,
        }

    def clean_name(self) -> str:
        name: str = self.cleaned_data["name"]
        others = McpServer.objects.filter(name=name)
        if self.instance is not None:
            others = others.exclude(pk=self.instance.pk)
        if others.exists():
            raise forms.ValidationError("A server with this name exists.")
        return name

    def clean_args(self) -> list[str]:
        return [line.strip() for line in self.cleaned_data["args"].splitlines() if line.strip()]

    def clean_env(self) -> dict[str, str]:
        return _pairs(self.cleaned_data["env"], "=", "env")

    def clean_secret_env(self) -> dict[str, str]:
        return _pairs(self.cleaned_data["secret_env"], "=", "secret_env")

    def clean_headers(self) -> dict[str, str]:
        return _pairs(self.cleaned_data["headers"], ":", "headers")

    def clean_secret_headers(self) -> dict[str, str]:
        return _pairs(self.cleaned_data["secret_headers"], ":", "secret_headers")

    def clean_roots(self) -> list[dict[str, str]]:
        roots = []
        for line in self.cleaned_data["roots"].splitlines():
            uri, _, name = line.strip().partition(" ")
            if uri:
                if "://" not in uri:
                    raise forms.ValidationError(f"{uri!r} is not a URI (e.g. file:///srv/data)")
                roots.append({"uri": uri, "name": name.strip()})
        return roots

    def clean(self) -> dict[str, Any]:
        data = super().clean() or {}
        transport = data.get("transport")
        if transport and TRANSPORTS[transport].spawns_process and not data.get("command"):
            self.add_error("command", "A stdio server needs a command to launch.")
        if transport and not TRANSPORTS[transport].spawns_process and not data.get("url"):
            self.add_error("url", "An HTTP server needs its URL.")
        return data

    def model_fields(self) -> dict[str, Any]:
        data = self.cleaned_data
        names = (
            "name",
            "description",
            "transport",
            "command",
            "args",
            "cwd",
            "url",
            "era",
            "call_timeout",
            "roots",
            "sampling_profile",
            "sampling_review",
            "elicitation",
            "enabled",
            "allow_non_staff_spawn",
        )
        return {name: data[name] for name in names}


# The string formats an elicitation's requestedSchema may ask for (MCP specification,
# "Elicitation", requested schema: email, uri, date, date-time), checked before an answer is
# sent: jsonschema treats ``format`` as a note unless given a checker, and its own checkers for
# uri and date-time need packages this app does not install.
ELICITATION_FORMATS = jsonschema.FormatChecker(formats=())
_EMAIL = re.compile(r"[^@\s]+@[^@\s.]+(\.[^@\s.]+)+")
_URI = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*:[^\s]+")
_DATE = re.compile(r"\d{4}-\d{2}-\d{2}")
_DATE_TIME = re.compile(r"\d{4}-\d{2}-\d{2}[Tt]\d{2}:\d{2}:\d{2}(\.\d+)?([Zz]|[+-]\d{2}:\d{2})")


@ELICITATION_FORMATS.checks("email")
def _is_email(value: object) -> bool:
    return not isinstance(value, str) or _EMAIL.fullmatch(value) is not None


@ELICITATION_FORMATS.checks("uri")
def _is_uri(value: object) -> bool:
    """An absolute URI (RFC 3986 §4.3): a scheme, a colon, and no whitespace."""
    return not isinstance(value, str) or _URI.fullmatch(value) is not None


@ELICITATION_FORMATS.checks("date", raises=ValueError)
def _is_date(value: object) -> bool:
    """A full-date of RFC 3339 §5.6 that exists on the calendar."""
    if not isinstance(value, str):
        return True
    return _DATE.fullmatch(value) is not None and bool(date.fromisoformat(value))


@ELICITATION_FORMATS.checks("date-time", raises=ValueError)
def _is_date_time(value: object) -> bool:
    """A date-time of RFC 3339 §5.6: date, ``T``, time and an offset (``Z`` or ``±hh:mm``)."""
    if not isinstance(value, str):
        return True
    return _DATE_TIME.fullmatch(value) is not None and bool(datetime.fromisoformat(value.upper()))


def schema_errors(
    schema: dict[str, Any], instance: Any, *, formats: jsonschema.FormatChecker | None = None
) -> list[str]:
    """Every way ``instance`` fails ``schema`` (JSON Schema 2020-12 unless it says otherwise);
    ``formats`` checks the ``format`` keywords it knows (none are checked without it)."""
    try:
        validator_class = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
        validator_class.check_schema(schema)
    except jsonschema.SchemaError as exc:
        return [f"the tool's inputSchema is not a valid JSON Schema: {exc.message}"]
    return [
        f"{'/'.join(str(part) for part in error.absolute_path) or '(arguments)'}: {error.message}"
        for error in sorted(
            validator_class(schema, format_checker=formats).iter_errors(instance),
            key=lambda e: list(e.absolute_path),
        )
    ]


class ToolCallForm(forms.Form):
    """The arguments of a manual call, checked against the tool's inputSchema before sending.

    ``send_anyway``: the user chose to send arguments that break the schema (to see how the
    server's own validation answers): the errors are kept in ``overridden`` instead of refusing.
    Text that is not a JSON object is refused either way. ``schema_failed``: the arguments
    were refused for the schema alone (the page then offers to send them anyway).
    """

    arguments = forms.CharField(
        widget=forms.Textarea(attrs={"rows": 8, "spellcheck": "false", "class": "raw-json"}),
        initial="{}",
        label="Arguments (JSON)",
    )

    def __init__(
        self, *args: Any, schema: dict[str, Any] | None = None, send_anyway: bool = False, **kwargs: Any
    ) -> None:
        super().__init__(*args, **kwargs)
        self.schema = schema or {"type": "object"}
        self.send_anyway = send_anyway
        self.overridden: list[str] = []
        self.schema_failed = False

    def clean_arguments(self) -> dict[str, Any]:
        try:
            value = json.loads(self.cleaned_data["arguments"] or "{}")
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("the arguments must be a JSON object")
        errors = schema_errors(self.schema, value)
        if errors and self.send_anyway:
            self.overridden = errors
        elif errors:
            self.schema_failed = True
            raise forms.ValidationError(errors)
        return value


class SaveCallForm(forms.Form):
    name = forms.CharField(max_length=120, required=False)


class ResourceReadForm(forms.Form):
    # As long as an operation's target may be (the URI is stored with what was done with it).
    uri = forms.CharField(max_length=500)


class CompletionForm(forms.Form):
    ref_type = forms.ChoiceField(choices=[("ref/prompt", "prompt"), ("ref/resource", "resource template")])
    ref = forms.CharField(max_length=2000, help_text="The prompt name or the URI template.")
    argument = forms.CharField(max_length=200)
    value = forms.CharField(max_length=2000, required=False)
    context = forms.CharField(required=False, help_text="The other arguments so far, as a JSON object.")

    def clean_context(self) -> dict[str, str]:
        text = self.cleaned_data["context"]
        if not text:
            return {}
        try:
            value = json.loads(text)
        except ValueError as exc:
            raise forms.ValidationError(f"not JSON: {exc}") from None
        if not isinstance(value, dict):
            raise forms.ValidationError("a JSON object")
        return {str(k): str(v) for k, v in value.items()}


class OAuthClientForm(forms.Form):
    """A client registered with the server's authorization server beforehand (RFC 6749 §2).

    The secret is optional (a public client has none); it is never rendered back.
    """

    client_id = forms.CharField(label="client id", max_length=500)
    client_secret = forms.CharField(
        label="client secret",
        max_length=4000,
        required=False,
        strip=False,
        widget=forms.PasswordInput(attrs={"autocomplete": "new-password"}, render_value=False),
    )
