"""Forms of the eval pages: a suite typed in (JSON or YAML) or uploaded as a file, and the
settings of a run. The suite's text is validated where it is stored (``evals.services.suite_save``),
whose error names the field it is about (``cases[0].expect[0].tool: …``); the page shows it on
the form, with the text still in the box."""

from __future__ import annotations

from django import forms
from django.core.files.uploadedfile import UploadedFile
from django.template.defaultfilters import filesizeformat

from inspector.evals.suites import MAX_REPEATS, MAX_SUITE_CHARS

# A suite file's bytes: UTF-8 takes at most four per character.
SUITE_UPLOAD_MAX_BYTES = 4 * MAX_SUITE_CHARS
MAX_CONCURRENCY = 32
EXAMPLE_SUITE = """\
{"name": "weather-basics",
 "models": ["demo"],
 "paradigms": ["native", "prompt_xml", "prompt_json", "structured", "intent"],
 "servers": ["demo"],
 "variants": {"plain": {}, "terse": {"demo/get_weather_forecast": {"description": "Weather."}}},
 "cases": [
   {"question": "What will the weather be like in Beijing tomorrow?", "expect": [{"tool": "demo/get_weather_forecast", "arguments": {"city": "Beijing"}}]},
   {"question": "What is 12 * (3 + 4)?", "expect": [{"tool": "demo/calculate"}]},
   {"question": "Hello there", "expect": []}
 ]}
"""


class SuiteForm(forms.Form):
    """A suite typed into the page: the text is kept as written and validated as a whole."""

    document = forms.CharField(
        label="Suite (JSON or YAML)",
        max_length=MAX_SUITE_CHARS,
        strip=False,
        widget=forms.Textarea(attrs={"rows": 22, "class": "suite-document", "spellcheck": "false"}),
        help_text="name, models, paradigms, servers, variants (optional), tool_choice (optional), "
        "cases: question, expect (a list of {tool, arguments}, or [] for no call), answer_contains.",
    )


class SuiteUploadForm(forms.Form):
    """A suite file (``.json``, ``.yaml`` or ``.yml``) to store as a new suite."""

    file = forms.FileField(
        label="Suite file",
        help_text="A JSON or YAML suite, as `manage.py eval run FILE` reads it.",
        widget=forms.ClearableFileInput(
            attrs={"accept": ".json,.yaml,.yml,application/json,application/yaml"}
        ),
    )

    def clean_file(self) -> UploadedFile[bytes]:
        upload: UploadedFile[bytes] = self.cleaned_data["file"]
        if upload.size is not None and upload.size > SUITE_UPLOAD_MAX_BYTES:
            raise forms.ValidationError(
                f"The file is {filesizeformat(upload.size)}; a suite is at most "
                f"{filesizeformat(SUITE_UPLOAD_MAX_BYTES)}."
            )
        return upload

    def content(self) -> bytes:
        """The file's bytes (after ``is_valid``)."""
        upload: UploadedFile[bytes] = self.cleaned_data["file"]
        upload.seek(0)
        data: bytes = upload.read(SUITE_UPLOAD_MAX_BYTES + 1)
        return data


class RunForm(forms.Form):
    """How to run a suite: turns in flight at once, and how often each case runs per cell."""

    concurrency = forms.IntegerField(
        min_value=1,
        max_value=MAX_CONCURRENCY,
        label="Concurrency",
        help_text="How many conversations run at once.",
        widget=forms.NumberInput(attrs={"min": 1, "max": MAX_CONCURRENCY}),
    )
    repeats = forms.IntegerField(
        min_value=1,
        max_value=MAX_REPEATS,
        label="Repeats",
        help_text=(
            "How many times each case runs in each cell (for models that do not always answer alike); "
            "a case that states its own repeats runs that many times."
        ),
        widget=forms.NumberInput(attrs={"min": 1, "max": MAX_REPEATS}),
    )
