"""The redactor: every built-in pattern, staff rules and run secrets, in short and long texts.

A built-in pattern is skipped on a text that fails its screen (a test every text it matches
passes: a prefix its matches must start with); these cases make sure that shortcut never lets a
secret through, in ASCII texts and in texts with other characters."""

from __future__ import annotations

import io
import json
import logging
import random
import re
import sys
from dataclasses import replace

import pytest
from django.conf import settings
from hypothesis import given
from hypothesis import settings as hypothesis_settings
from hypothesis import strategies as st

from conversations.models import Turn
from conversations.redaction import LogRedactionFilter, redactor, remember
from conversations.secret_sources import active_redactor, configured_secrets
from conversations.services import conversation_start
from servers.vault import seal
from tests.factories import McpServerFactory, ModelProfileFactory, UserFactory

KEYS = [
    ("sk-proj-Abcdefghijklmnopqrstuvwxyz0123", "api_key"),
    ("sk-ant-api03-Abcdefghijklmnopqrstuvwxyz", "api_key"),
    ("AKIAABCDEFGHIJKLMNOP", "api_key"),
    ("ghp_" + "a1" * 18, "api_key"),
    ("gho_" + "Z9" * 16, "api_key"),
    ("ghu_" + "x" * 30, "api_key"),
    ("ghs_" + "Q" * 30, "api_key"),
    ("ghr_" + "7" * 30, "api_key"),
    ("xoxb-1234567890-abcdef", "api_key"),
    ("AIza" + "B" * 35, "api_key"),
    ("Bearer abc.def-ghi_jkl", "bearer_token"),
    ("BEARER ABCDEFGHIJKLMN", "bearer_token"),
    ("bearer    token1234567", "bearer_token"),
    ("bEaReR mixed.case-token", "bearer_token"),
    ("ada.lovelace+inspector@example.co.uk", "email"),
]


@pytest.mark.parametrize(("secret", "kind"), KEYS)
def test_each_builtin_pattern_redacts_its_secrets_alone_and_inside_a_long_json_body(
    secret: str, kind: str
) -> None:
    redact = redactor()
    body = json.dumps(
        {"messages": [{"role": "user", "content": "the running totals, one call at a time " * 200}]}
    )
    long_text = body[:4000] + f" {secret} " + body[4000:]
    # A body with characters outside ASCII is screened another way (its UTF-8 bytes).
    wide_text = long_text.replace("running", "rünning — 21 °C, İstanbul 😀")

    assert redact.text(secret) == f"[REDACTED:{kind}]"
    for text in (long_text, wide_text):
        assert secret not in redact.text(text) and f"[REDACTED:{kind}]" in redact.text(text)
    assert redact.json({"headers": [long_text]}) == {"headers": [redact.text(long_text)]}


def test_no_character_outside_ascii_matches_a_letter_of_bearer_regardless_of_case() -> None:
    """What the bearer screen relies on: lower-casing ASCII letters alone finds every text the
    case-insensitive pattern can match."""
    others = "".join(chr(code) for code in range(128, sys.maxunicode + 1) if not 0xD800 <= code <= 0xDFFF)

    assert re.findall(r"(?i)[bear]", others) == []
    assert re.findall(r"(?i)[bear]", "bEaRBEAR") == list("bEaRBEAR")  # the search itself works


def test_the_screens_never_change_what_is_redacted() -> None:
    """The redactor with its screens and the same redactor scanning every text with every
    pattern give the same text, over secrets in many surroundings and near-misses of each."""
    screened = redactor(secrets=["a-run-secret-value"])
    unscreened = replace(screened, screens=())
    pieces = [secret for secret, _ in KEYS] + [
        "sk", "sk-", "AKI", "AIz", "gh_", "ghx_", "xo", "xox", "Bear", "bearer", "BEARER", "b e a r e r",
        "@", "a@b", "ü", "—", "😀", "İ", "\ud800", "\udc80", '"', "\n", " ", "{", "tool_calls", "a-run-secret-value",
    ]  # fmt: skip
    chance = random.Random(21)
    texts = [
        "".join(
            chance.choice(pieces) + chance.choice(["", " ", "-", "_", "é"])
            for _ in range(chance.randint(1, 12))
        )
        for _ in range(3000)
    ]
    texts += [
        json.dumps({"text": text}, ensure_ascii=ascii) for text in texts[:300] for ascii in (True, False)
    ]

    assert [screened.text(text) for text in texts] == [unscreened.text(text) for text in texts]


# Secrets whose JSON form differs from them: a quote, a backslash, a control character.
_JSON_ESCAPED_SECRETS = ['quote"d-secret', "back\\slash-secret", "new\nline-secret"]
_PIECES = [secret for secret, _ in KEYS] + _JSON_ESCAPED_SECRETS + [
    "a-run-secret-value", "sk", "sk-", "AKI", "xox", "gh_", "Bear", "bearer", "@", "ü", "😀", "\ud800",
    '"', "\\", "\n", "\x00", " ", "plain words", "tool_calls",
]  # fmt: skip
_texts = st.lists(st.sampled_from(_PIECES), max_size=5).map("".join)
_json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | _texts,
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(_texts, inner, max_size=4),
    max_leaves=20,
)


@hypothesis_settings(max_examples=400, deadline=None)
@given(value=_json_values)
def test_a_json_value_is_redacted_as_each_of_its_strings_would_be(value: object) -> None:
    """The whole-text screen (``Redactor._untouched``) never spares a string that a walk over
    every string would change: keys, escapes and secrets whose JSON form differs included."""
    redact = redactor(secrets=["a-run-secret-value", *_JSON_ESCAPED_SECRETS])

    assert redact.json(value) == redact._walk(value)


def test_a_json_value_with_nothing_to_redact_comes_back_as_it_is_unless_a_staff_rule_applies() -> None:
    tools = [
        {"name": "calculate", "description": "Adds, subtracts — 21 °C", "inputSchema": {"type": "object"}}
    ]
    # A staff rule has no screen and may anchor to a string's start: every string is scanned.
    ruled = redactor(rules=[("ticket", r"^calc\w+$")])

    assert redactor(secrets=["a-run-secret-value"]).json(tools) is tools
    assert ruled.json(tools) == [{**tools[0], "name": "[REDACTED:ticket]"}]
    assert redactor().json([tools, "ada@example.com"]) == [tools, "[REDACTED:email]"]


def test_text_without_secrets_comes_back_unchanged() -> None:
    text = json.dumps(
        {"content": [{"type": "text", "text": "Sunny, 21 °C in Beijing; high of 24 — İstanbul"}]}
    )

    assert redactor().text(text) == text


def test_staff_rules_and_run_secrets_are_always_applied() -> None:
    redact = redactor(rules=[("ticket", r"TCK-\d{4}")], secrets=["hunter2-swordfish", "abc"])

    assert (
        redact.text("see TCK-1234 with hunter2-swordfish") == "see [REDACTED:ticket] with [REDACTED:secret]"
    )
    # Secrets shorter than 6 characters are ignored: replacing them everywhere protects nothing.
    assert redact.text("abc") == "abc"


# --- one redactor: configured secrets, logs --------------------------------------------------------


@pytest.mark.django_db
def test_the_active_redactor_knows_every_configured_secret_value(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("H4_UNIT_KEY", "unit-profile-key-0042")
    monkeypatch.setenv("H4_UNIT_REF", "unit-referenced-0042")
    ModelProfileFactory(api_key_env="H4_UNIT_KEY")
    McpServerFactory(
        env={"A": seal("unit-sealed-env-0042"), "B": "${H4_UNIT_REF}", "PLAIN": "not-a-secret-0042"}
    )
    McpServerFactory(
        transport="http", url="http://127.0.0.1:9/mcp", headers={"X-Key": seal("unit-header-0042")}
    )

    redact = active_redactor()
    text = (
        "unit-profile-key-0042 unit-referenced-0042 unit-sealed-env-0042 unit-header-0042 not-a-secret-0042"
    )

    assert redact.text(text) == " ".join(["[REDACTED:secret]"] * 4 + ["not-a-secret-0042"])


@pytest.mark.django_db
def test_a_key_many_profiles_name_is_one_secret_value(monkeypatch: pytest.MonkeyPatch) -> None:
    # The profiles' default ordering once crept into the DISTINCT: one value per profile.
    monkeypatch.setenv("H4_SHARED_KEY", "shared-profile-key-0042")
    for _ in range(3):
        ModelProfileFactory(api_key_env="H4_SHARED_KEY")

    assert configured_secrets().count("shared-profile-key-0042") == 1


def test_the_log_filter_redacts_messages_arguments_and_tracebacks() -> None:
    remember(redactor(secrets=["log-secret-value-0042"]))
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.addFilter(LogRedactionFilter())
    logger = logging.getLogger("tests.redaction.filter")
    logger.addHandler(handler)
    try:
        logger.error("key %s and %s", "log-secret-value-0042", "ops@example.com")
        try:
            raise ValueError("failed on log-secret-value-0042")
        except ValueError:
            logger.exception("with a traceback")
    finally:
        logger.removeHandler(handler)

    written = stream.getvalue()
    assert "log-secret-value-0042" not in written and "ops@example.com" not in written
    assert "key [REDACTED:secret] and [REDACTED:email]" in written
    assert "ValueError: failed on [REDACTED:secret]" in written


def test_the_log_filter_is_installed_on_the_configured_handler() -> None:
    filters = settings.LOGGING["filters"]
    assert filters["redact"]["()"] == "conversations.redaction.LogRedactionFilter"
    assert "redact" in settings.LOGGING["handlers"]["console"]["filters"]


@pytest.mark.django_db
def test_a_question_is_stored_redacted_and_so_is_the_conversation_title() -> None:
    conversation, turn = conversation_start(
        owner=UserFactory(),
        model_profile=ModelProfileFactory(),
        question="mail ops@example.com the key sk-proj-Abcdefghijklmnopqrstuvwxyz0123",
        servers=[],
        dispatch=False,
    )

    stored = Turn.objects.get(pk=turn.pk)
    assert stored.question == "mail [REDACTED:email] the key [REDACTED:api_key]"
    assert "example.com" not in conversation.title and "[REDACTED:email]" in conversation.title


@pytest.mark.django_db
def test_a_new_conversation_and_a_comparison_read_the_secrets_once(monkeypatch: pytest.MonkeyPatch) -> None:
    """One redactor per request for the title, the question and every run of a comparison (each
    build reads the profiles' keys, the servers' secrets and the staff rules), still redacting
    all of them."""
    from conversations import services

    builds: list[object] = []

    def counted() -> object:
        built = active_redactor()
        builds.append(built)
        return built

    monkeypatch.setattr(services, "active_redactor", counted)
    question = "mail ops@example.com"
    conversation, turn = conversation_start(
        owner=UserFactory(),
        model_profile=ModelProfileFactory(),
        question=question,
        servers=[],
        dispatch=False,
    )
    comparison, turns = services.comparison_start(
        owner=UserFactory(),
        question=question,
        runs=[(ModelProfileFactory(), "native"), (ModelProfileFactory(), "intent")],
        servers=[],
        dispatch=False,
    )

    assert len(builds) == 2
    assert "[REDACTED:email]" in conversation.title and turn.question == "mail [REDACTED:email]"
    assert comparison.question == "mail [REDACTED:email]"
    assert [t.question for t in turns] == ["mail [REDACTED:email]"] * 2
    assert all("example.com" not in t.conversation.title for t in turns)


# --- the configured secrets are read again only when they change ----------------------------------


SECRET_TEXT = "watched-secret-0042"


def _masks(text: str) -> bool:
    return active_redactor().text(text) == "[REDACTED:secret]"


@pytest.mark.django_db
def test_a_redactor_built_again_with_nothing_changed_reads_only_the_version(
    django_assert_num_queries: object,
) -> None:
    # Every question asked and every turn started builds one: its three reads were 2 ms a time.
    McpServerFactory(env={"A": seal(SECRET_TEXT)})
    assert _masks(SECRET_TEXT)

    with django_assert_num_queries(1):  # type: ignore[operator]
        assert _masks(SECRET_TEXT)
    with django_assert_num_queries(1):  # type: ignore[operator]
        assert active_redactor(secrets=["run-secret-0042"]).text("run-secret-0042") == "[REDACTED:secret]"


@pytest.mark.django_db
@pytest.mark.parametrize(
    "change",
    [
        "server created",
        "server env saved",
        "server headers updated in bulk",
        "server env set in SQL",
        "rule created",
        "rule enabled in bulk",
        "profile key variable updated in bulk",
        "profile key variable set in SQL",
    ],
)
def test_a_secret_configured_any_way_is_masked_at_once(change: str, monkeypatch: pytest.MonkeyPatch) -> None:
    from django.db import connection

    from conversations.models import ModelProfile, RedactionRule
    from servers.models import McpServer

    monkeypatch.setenv("H4_WATCHED_KEY", SECRET_TEXT)
    server = McpServerFactory(env={"PLAIN": "x"})
    profile = ModelProfileFactory(api_key_env="H4_NOT_SET_0042")
    rule = RedactionRule.objects.create(name="watched", pattern=SECRET_TEXT, enabled=False)
    assert not _masks(SECRET_TEXT)  # built once, before the change

    if change == "server created":
        McpServerFactory(env={"A": seal(SECRET_TEXT)})
    elif change == "server env saved":
        server.env = {"A": "${H4_WATCHED_KEY}"}
        server.save()
    elif change == "server headers updated in bulk":
        McpServer.objects.filter(pk=server.pk).update(headers={"X-Key": seal(SECRET_TEXT)})
    elif change == "server env set in SQL":
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {McpServer._meta.db_table} SET env = %s WHERE id = %s",
                [json.dumps({"A": seal(SECRET_TEXT)}), server.pk],
            )
    elif change == "rule created":
        RedactionRule.objects.create(name="watched-too", pattern="watched-secret-[0-9]+")
    elif change == "rule enabled in bulk":
        RedactionRule.objects.filter(pk=rule.pk).update(enabled=True)
    elif change == "profile key variable updated in bulk":
        ModelProfile.objects.filter(pk=profile.pk).update(api_key_env="H4_WATCHED_KEY")
    else:
        with connection.cursor() as cursor:
            cursor.execute(
                f"UPDATE {ModelProfile._meta.db_table} SET api_key_env = %s WHERE id = %s",
                ["H4_WATCHED_KEY", profile.pk],
            )

    masked = active_redactor().text(SECRET_TEXT)
    assert masked.startswith("[REDACTED:") and SECRET_TEXT not in masked


@pytest.mark.django_db
def test_a_key_variable_set_in_the_environment_later_is_masked_at_once(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    ModelProfileFactory(api_key_env="H4_LATE_KEY")
    assert not _masks(SECRET_TEXT)

    monkeypatch.setenv("H4_LATE_KEY", SECRET_TEXT)

    assert _masks(SECRET_TEXT)


@pytest.mark.django_db
def test_a_change_that_leaves_the_secrets_alone_does_not_make_them_read_again(
    django_assert_num_queries: object,
) -> None:
    # A profile's capabilities are saved by a turn that learned one is missing: no secret moved.
    from conversations.models import ModelProfile
    from servers.models import McpServer

    profile = ModelProfileFactory(api_key_env="H4_KEY_0042")
    server = McpServerFactory(env={"A": seal(SECRET_TEXT)})
    assert _masks(SECRET_TEXT)

    ModelProfile.objects.filter(pk=profile.pk).update(native_tools=False)
    McpServer.objects.filter(pk=server.pk).update(description="renamed")

    with django_assert_num_queries(1):  # type: ignore[operator]
        assert _masks(SECRET_TEXT)


@pytest.mark.django_db(transaction=True)
def test_a_secret_another_process_commits_is_masked_here_at_once() -> None:
    import threading

    from django.db import connection

    assert not _masks(SECRET_TEXT)

    def elsewhere() -> None:  # its own connection, committing as another process would
        try:
            McpServerFactory(env={"A": seal(SECRET_TEXT)})
        finally:
            connection.close()

    thread = threading.Thread(target=elsewhere)
    thread.start()
    thread.join()

    assert _masks(SECRET_TEXT)
