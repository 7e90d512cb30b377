"""Server forms: an elicitation's answer is checked against the requested schema's formats and bounds."""

from __future__ import annotations

from typing import Any

import pytest

from servers.forms import ELICITATION_FORMATS, schema_errors

ASKED: dict[str, Any] = {
    "type": "object",
    "properties": {
        "email": {"type": "string", "format": "email"},
        "site": {"type": "string", "format": "uri"},
        "born": {"type": "string", "format": "date"},
        "at": {"type": "string", "format": "date-time"},
        "age": {"type": "integer", "minimum": 0, "maximum": 150},
    },
}


def errors(**answer: Any) -> list[str]:
    return schema_errors(ASKED, answer, formats=ELICITATION_FORMATS)


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("email", "not an address"),
        ("email", "bob@"),
        ("site", "example dot com"),
        ("site", "/relative/path"),
        ("born", "yesterday"),
        ("born", "2026-02-30"),
        ("at", "2026-12-05"),
        ("at", "2026-12-05T10:00:00"),
    ],
)
def test_text_that_is_not_the_asked_format_is_refused_naming_the_field(field: str, value: str) -> None:
    refused = errors(**{field: value})

    assert len(refused) == 1 and refused[0].startswith(f"{field}: ")
    assert "is not a" in refused[0]


@pytest.mark.parametrize(
    ("field", "value"),
    [
        ("email", "bob@example.com"),
        ("site", "https://example.com/a?b=c"),
        ("site", "urn:isbn:0451450523"),
        ("born", "2024-02-29"),
        ("at", "2026-12-05T10:00:00Z"),
        ("at", "2026-12-05T10:00:00.5+01:00"),
    ],
)
def test_text_of_the_asked_format_is_accepted(field: str, value: str) -> None:
    assert errors(**{field: value}) == []


@pytest.mark.parametrize("age", [-1, 151])
def test_a_number_outside_its_bounds_is_refused(age: int) -> None:
    assert len(errors(age=age)) == 1


def test_without_the_checker_formats_are_not_checked() -> None:
    assert schema_errors(ASKED, {"email": "not an address"}) == []
