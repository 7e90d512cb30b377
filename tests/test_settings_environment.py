"""Every setting is read from the environment by one small set of helpers (inspector.environment),
and a value the app cannot use stops the process at start with one line that names the variable,
the value and what is allowed: a typo never turns hardening off, fails at the first question, or
shows a traceback that does not say which variable."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
from django.core.exceptions import ImproperlyConfigured

from inspector import environment

REPO_ROOT = Path(__file__).resolve().parent.parent
SETTINGS = REPO_ROOT / "inspector" / "settings.py"

Reader = Callable[[], object]

# (variable, value, how settings.py reads it, what the refusal must say besides the name and value)
REFUSED: list[tuple[str, str, Reader, str]] = [
    ("AGENT_MAX_STEPS", "abc", lambda: environment.env_int("AGENT_MAX_STEPS", 8, minimum=1), "whole number"),
    ("AGENT_MAX_STEPS", "-5", lambda: environment.env_int("AGENT_MAX_STEPS", 8, minimum=1), "at least 1"),
    (
        "SECURE_HSTS_SECONDS",
        "1y",
        lambda: environment.env_int("SECURE_HSTS_SECONDS", 0, minimum=0),
        "1y is 31536000",
    ),
    (
        "MODEL_TIMEOUT_SECONDS",
        "2m",
        lambda: environment.env_seconds("MODEL_TIMEOUT_SECONDS", 120.0),
        "2m is 120",
    ),
    (
        "MODEL_TIMEOUT_SECONDS",
        "0",
        lambda: environment.env_seconds("MODEL_TIMEOUT_SECONDS", 120.0),
        "above 0",
    ),
    (
        "MODEL_TIMEOUT_SECONDS",
        "nan",
        lambda: environment.env_seconds("MODEL_TIMEOUT_SECONDS", 120.0),
        "seconds",
    ),
    (
        "DEMO_MODEL_LATENCY_SECONDS",
        "-1",
        lambda: environment.env_seconds("DEMO_MODEL_LATENCY_SECONDS", 0.0, zero_allowed=True),
        "0 or more",
    ),
    (
        "DATABASE_POOL_MAX_SIZE",
        "ten",
        lambda: environment.env_int("DATABASE_POOL_MAX_SIZE", 20, minimum=1),
        "whole number",
    ),
    ("DEBUG", "ture", lambda: environment.env_bool("DEBUG", False), "1, 0, true, false, yes, no, on, off"),
    (
        "SECURE_SSL_REDIRECT",
        "yes_please",
        lambda: environment.env_bool("SECURE_SSL_REDIRECT", False),
        "1, 0, true, false, yes, no, on, off",
    ),
    (
        "TURN_RUNNER",
        "celeri",
        lambda: environment.env_choice("TURN_RUNNER", "embedded", ("celery", "embedded")),
        "celery, embedded",
    ),
    (
        "LOG_LEVEL",
        "LOUD",
        lambda: environment.env_choice("LOG_LEVEL", "INFO", environment.LOG_LEVELS, any_case=True),
        "DEBUG, INFO, WARNING, ERROR, CRITICAL",
    ),
    (
        "DATABASE_URL",
        "mysql://inspector@db:3306/inspector",
        lambda: environment.env_url(
            "DATABASE_URL", "", schemes=("postgres", "postgresql"), host_required=False
        ),
        "postgres://",
    ),
    (
        "DATABASE_URL",
        "postgres://inspector@db:port/inspector",
        lambda: environment.env_url(
            "DATABASE_URL", "", schemes=("postgres", "postgresql"), host_required=False
        ),
        "port",
    ),
    (
        "OAUTH_REDIRECT_URL",
        "localhost:8000/servers/oauth/callback/",
        lambda: environment.env_url("OAUTH_REDIRECT_URL", "", schemes=("http", "https")),
        "http://",
    ),
    (
        "SECURE_PROXY_SSL_HEADER",
        "X-Forwarded-Proto:https",
        lambda: environment.env_header("SECURE_PROXY_SSL_HEADER", example="X-Forwarded-Proto"),
        "header's name",
    ),
    (
        "SECURE_PROXY_SSL_HEADER",
        "HTTP_X_FORWARDED_PROTO",
        lambda: environment.env_header("SECURE_PROXY_SSL_HEADER", example="X-Forwarded-Proto"),
        "X-Forwarded-Proto",
    ),
]


@pytest.mark.parametrize(
    ("name", "value", "read", "allowed"), REFUSED, ids=[f"{name}={value}" for name, value, _, _ in REFUSED]
)
def test_a_value_the_app_cannot_use_is_refused_naming_the_variable_the_value_and_what_is_allowed(
    monkeypatch: pytest.MonkeyPatch, name: str, value: str, read: Reader, allowed: str
) -> None:
    monkeypatch.setenv(name, value)

    with pytest.raises(ImproperlyConfigured) as refused:
        read()

    message = str(refused.value)
    assert message.startswith(f"{name}={value!r}") and allowed in message and "\n" not in message


@pytest.mark.parametrize("suffix", ["", "-missing"])
def test_a_secret_file_that_is_missing_or_a_directory_is_refused_naming_its_variable(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, suffix: str
) -> None:
    path = f"{tmp_path}{suffix}"  # the directory itself, or a path nothing is at
    monkeypatch.setenv("SECRET_KEY_FILE", path)

    with pytest.raises(ImproperlyConfigured) as refused:
        environment.env_str("SECRET_KEY")

    assert str(refused.value).startswith(f"SECRET_KEY_FILE={path!r}: ")
    assert ("no such file" if suffix else "not a file") in str(refused.value)


def test_an_empty_secret_file_is_refused_rather_than_read_as_no_key(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    (tmp_path / "key").write_text("\n")
    monkeypatch.setenv("INTEGRITY_KEY_FILE", str(tmp_path / "key"))

    with pytest.raises(ImproperlyConfigured, match=r"^INTEGRITY_KEY_FILE=.*: the file is empty"):
        environment.env_str("INTEGRITY_KEY")


def test_a_refused_url_never_shows_its_password(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DATABASE_URL", "mysql://inspector:hunter2-secret@db:3306/inspector")

    with pytest.raises(ImproperlyConfigured) as refused:
        environment.env_url("DATABASE_URL", "", schemes=("postgres", "postgresql"), host_required=False)

    assert "hunter2-secret" not in str(refused.value) and "mysql://inspector:***@db:3306" in str(
        refused.value
    )


@pytest.mark.parametrize(
    ("value", "expected"),
    [("1", True), ("TRUE", True), ("Yes", True), ("on", True), ("0", False), ("false", False), ("NO", False)],
)
def test_the_documented_spellings_of_a_switch_are_read_in_any_case(
    monkeypatch: pytest.MonkeyPatch, value: str, expected: bool
) -> None:
    monkeypatch.setenv("SECURE_SSL_REDIRECT", value)

    assert environment.env_bool("SECURE_SSL_REDIRECT", not expected) is expected


def test_values_in_the_documented_forms_are_read(monkeypatch: pytest.MonkeyPatch) -> None:
    for name, value in {
        "AGENT_MAX_STEPS": "12",
        "MODEL_TIMEOUT_SECONDS": "2.5",
        "LOG_LEVEL": "warning",
        "SECURE_PROXY_SSL_HEADER": "x-forwarded-proto",
        "DATABASE_URL": "postgresql://inspector:p%40ss@db:5432/inspector?sslmode=require",
        "TURN_RUNNER": "celery",
    }.items():
        monkeypatch.setenv(name, value)

    assert environment.env_int("AGENT_MAX_STEPS", 8, minimum=1) == 12
    assert environment.env_seconds("MODEL_TIMEOUT_SECONDS", 120.0) == 2.5
    assert environment.env_choice("LOG_LEVEL", "INFO", environment.LOG_LEVELS, any_case=True) == "WARNING"
    assert (
        environment.env_header("SECURE_PROXY_SSL_HEADER", example="X-Forwarded-Proto") == "x-forwarded-proto"
    )
    assert environment.env_url(
        "DATABASE_URL", "", schemes=("postgres", "postgresql"), host_required=False
    ) == ("postgresql://inspector:p%40ss@db:5432/inspector?sslmode=require")
    assert environment.env_choice("TURN_RUNNER", "embedded", ("celery", "embedded")) == "celery"


@pytest.mark.parametrize("value", ["", "   "])
def test_an_empty_or_blank_value_means_the_default(monkeypatch: pytest.MonkeyPatch, value: str) -> None:
    for name in (
        "AGENT_MAX_STEPS",
        "DEBUG",
        "TURN_RUNNER",
        "OAUTH_REDIRECT_URL",
        "SECRET_KEY_FILE",
        "SECRET_KEY",
    ):
        monkeypatch.setenv(name, value)

    assert environment.env_int("AGENT_MAX_STEPS", 8, minimum=1) == 8
    assert environment.env_bool("DEBUG", False) is False
    assert environment.env_choice("TURN_RUNNER", "embedded", ("celery", "embedded")) == "embedded"
    assert environment.env_url("OAUTH_REDIRECT_URL", "http://x/", schemes=("http", "https")) == "http://x/"
    assert environment.env_str("SECRET_KEY", "kept") == "kept"


def _env_reads() -> list[ast.Call]:
    """The calls in ``settings.py`` that read a variable: a function called with its name first."""
    return [
        node
        for node in ast.walk(ast.parse(SETTINGS.read_text()))
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id.startswith("env_")
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
    ]


def settings_names() -> set[str]:
    """Every environment variable ``settings.py`` reads (a string setting's ``NAME_FILE`` aside)."""
    return {str(call.args[0].value) for call in _env_reads() if isinstance(call.args[0], ast.Constant)}


def test_every_setting_read_from_the_environment_is_documented_in_the_deployment_guide() -> None:
    guide = (REPO_ROOT / "docs" / "deployment.md").read_text()

    assert sorted(name for name in settings_names() if f"`{name}`" not in guide) == []


def _settings_readers() -> set[str]:
    """The names of the functions ``settings.py`` calls with a variable's name (a string) first."""
    tree = ast.parse(SETTINGS.read_text())
    return {
        node.func.id
        for node in ast.walk(tree)
        if isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.args
        and isinstance(node.args[0], ast.Constant)
        and isinstance(node.args[0].value, str)
        and node.args[0].value.isupper()
    }


def test_settings_read_the_environment_only_through_the_helpers() -> None:
    text = SETTINGS.read_text()

    assert "os.environ" not in text and "getenv" not in text
    helpers = {name for name in dir(environment) if name.startswith("env_")}
    assert _settings_readers() <= helpers | {"refuse"}  # refuse: a refusal of two settings together


# --- start-up: the process refuses to start, with one line -------------------------------------


def _manage(tmp_path: Path, *args: str, **extra: str) -> subprocess.CompletedProcess[str]:
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in {"DATABASE_URL", "REDIS_URL"} and not key.startswith(("SECRET_KEY", "INTEGRITY_KEY"))
    }
    env.update(VAR_DIR=str(tmp_path / "var"), **extra)
    return subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )


STARTS_REFUSED = [
    ({"AGENT_MAX_STEPS": "abc"}, "AGENT_MAX_STEPS='abc'"),
    ({"DEBUG": "ture"}, "DEBUG='ture'"),
    ({"SECRET_KEY_FILE": "/run/secrets/no-such-key"}, "SECRET_KEY_FILE='/run/secrets/no-such-key'"),
    ({"RECORD_STORE": "fast"}, "RECORD_STORE='fast'"),
    (
        {"DATABASE_POOL_MIN_SIZE": "50", "DATABASE_POOL_MAX_SIZE": "5"},
        "DATABASE_POOL_MIN_SIZE=50: more than DATABASE_POOL_MAX_SIZE=5",
    ),
]


@pytest.mark.parametrize(("env", "named"), STARTS_REFUSED, ids=[named for _, named in STARTS_REFUSED])
def test_manage_py_refuses_to_start_with_one_line_naming_the_setting(
    tmp_path: Path, env: dict[str, str], named: str
) -> None:
    result = _manage(tmp_path, "check", **env)

    assert result.returncode != 0
    assert result.stderr.strip().splitlines() == [result.stderr.strip()], result.stderr
    assert result.stderr.startswith("ImproperlyConfigured: ") and named in result.stderr


def test_the_settings_the_docs_name_are_read_from_the_environment(tmp_path: Path) -> None:
    names = (
        "RECORD_STORE",
        "WORKBENCH_SAMPLING_REVIEW_SECONDS",
        "WORKBENCH_SUBSCRIPTION_SECONDS",
        "WORKBENCH_LONGEST_OPERATION_SECONDS",
        "READ_AUDIT_WINDOW_SECONDS",
    )
    given = {
        "RECORD_STORE": "orm",
        "WORKBENCH_SAMPLING_REVIEW_SECONDS": "45",
        "WORKBENCH_SUBSCRIPTION_SECONDS": "600",
        "WORKBENCH_LONGEST_OPERATION_SECONDS": "5400",
        "READ_AUDIT_WINDOW_SECONDS": "60",
    }
    script = f"from django.conf import settings; print([getattr(settings, name) for name in {names!r}])"

    result = _manage(tmp_path, "shell", "--verbosity", "0", "-c", script, **given)

    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "['orm', 45.0, 600.0, 5400.0, 60.0]"


def test_a_short_integrity_key_is_reported_by_the_deployment_checklist_as_a_short_secret_key_is(
    tmp_path: Path,
) -> None:
    result = _manage(tmp_path, "check", "--deploy", INTEGRITY_KEY="abc", SECRET_KEY="short")

    report = result.stdout + result.stderr
    assert "inspector.W001" in report and "INTEGRITY_KEY" in report and "32" in report
    assert "security.W009" in report  # Django's own check of SECRET_KEY


def test_the_turn_runners_the_settings_accept_are_the_ones_turns_are_dispatched_to() -> None:
    from django.conf import settings

    from conversations.execution import DISPATCHERS

    assert set(settings.TURN_RUNNERS) == set(DISPATCHERS)
