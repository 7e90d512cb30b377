"""The redactor: every built-in pattern, staff rules and run secrets, in short and long texts.

A built-in pattern is skipped on a text that lacks every substring its matches must contain;
these cases make sure that shortcut never lets a secret through."""

from __future__ import annotations

import json

import pytest

from conversations.redaction import redactor

KEYS = [
    ("sk-proj-Abcdefghijklmnopqrstuvwxyz0123", "api_key"),
    ("sk-ant-api03-Abcdefghijklmnopqrstuvwxyz", "api_key"),
    ("AKIAABCDEFGHIJKLMNOP", "api_key"),
    ("ghp_" + "a1" * 18, "api_key"),
    ("gho_" + "Z9" * 16, "api_key"),
    ("xoxb-1234567890-abcdef", "api_key"),
    ("AIza" + "B" * 35, "api_key"),
    ("Bearer abc.def-ghi_jkl", "bearer_token"),
    ("BEARER ABCDEFGHIJKLMN", "bearer_token"),
    ("bearer    token1234567", "bearer_token"),
    ("ada.lovelace+inspector@example.co.uk", "email"),
]


@pytest.mark.parametrize(("secret", "kind"), KEYS)
def test_each_builtin_pattern_redacts_its_secrets_alone_and_inside_a_long_json_body(secret: str, kind: str) -> None:
    redact = redactor()
    body = json.dumps({"messages": [{"role": "user", "content": "the running totals, one call at a time " * 200}]})
    long_text = body[:4000] + f" {secret} " + body[4000:]

    assert redact.text(secret) == f"[REDACTED:{kind}]"
    assert secret not in redact.text(long_text) and f"[REDACTED:{kind}]" in redact.text(long_text)
    assert redact.json({"headers": [long_text]}) == {"headers": [redact.text(long_text)]}


def test_text_without_secrets_comes_back_unchanged() -> None:
    text = json.dumps({"content": [{"type": "text", "text": "Sunny, 21 °C in Beijing; high of 24 — İstanbul"}]})

    assert redactor().text(text) == text


def test_staff_rules_and_run_secrets_are_always_applied() -> None:
    redact = redactor(rules=[("ticket", r"TCK-\d{4}")], secrets=["hunter2-swordfish", "abc"])

    assert redact.text("see TCK-1234 with hunter2-swordfish") == "see [REDACTED:ticket] with [REDACTED:secret]"
    # Secrets shorter than 6 characters are ignored: replacing them everywhere protects nothing.
    assert redact.text("abc") == "abc"
