"""How ``inspector/settings.py`` reads the environment: a few typed helpers, each of which refuses a
value the app cannot use with one line naming the variable, the value and what is allowed.

A typo must not turn hardening off (``SECURE_SSL_REDIRECT=yes_please`` read as off), fail at the
first question (``TURN_RUNNER=celeri``), nor stop the process with a traceback that does not say
which variable (``AGENT_MAX_STEPS=abc``). So every reader raises :class:`SettingError` (an
``ImproperlyConfigured``), and :func:`refusals_print_as_one_line` has the process print it as its
one line when nothing catches it.

An empty or blank value means *unset* (the default applies): Compose passes ``${NAME:-}`` to the
container as an empty string, not as an absent name. A string setting may instead come from the
file ``NAME_FILE`` names (a mounted secret); the file must exist and hold something.

Settings import this module before Django is set up: it imports only what reads no setting at
import (Django's exception, the lazy settings object and the system-check registry).
"""

from __future__ import annotations

import math
import os
import re
import sys
from collections.abc import Collection, Sequence
from pathlib import Path
from types import TracebackType
from typing import Any
from urllib.parse import urlsplit

from django.conf import settings
from django.core import checks
from django.core.exceptions import ImproperlyConfigured

# A switch's documented spellings, in any case.
BOOLEANS = {
    "1": True,
    "true": True,
    "yes": True,
    "on": True,
    "0": False,
    "false": False,
    "no": False,
    "off": False,
}
# The levels Python's logging knows by name (and the LOGGING dict passes on as they are).
LOG_LEVELS = ("DEBUG", "INFO", "WARNING", "ERROR", "CRITICAL")
# A request header's name as a proxy sends it: letters and digits in words joined by hyphens.
HEADER_NAME = re.compile(r"[A-Za-z0-9]+(?:-[A-Za-z0-9]+)*")
# A duration written with a unit (``2m``, ``1y``): refused, saying how many seconds it means.
WITH_UNIT = re.compile(r"(\d+(?:\.\d+)?)\s*([a-z]+)", re.IGNORECASE)
UNIT_SECONDS = {"s": 1, "sec": 1, "m": 60, "min": 60, "h": 3600, "d": 86_400, "w": 604_800, "y": 31_536_000}
# README: "INTEGRITY_KEY=<random, 32 or more characters>" (checked by `check --deploy`).
INTEGRITY_KEY_MIN_LENGTH = 32


class SettingError(ImproperlyConfigured):
    """A setting's value the app cannot use; the message names the variable, the value shown (a
    URL's password masked) and what is allowed, on one line."""


def refuse(name: str, value: object, problem: str) -> SettingError:
    """The error for ``name=value``; ``problem`` says what is wrong and what is allowed."""
    shown = value if isinstance(value, int) else repr(str(value)[:200])
    return SettingError(f"{name}={shown}: {problem}")


def env_value(name: str) -> str | None:
    """The one reader of the environment: ``name``'s value, or None when it is unset, empty or blank."""
    value = os.environ.get(name, "").strip()
    return value or None


def _file_text(name: str, path: str) -> str:
    """The stripped contents of the file that ``NAME_FILE`` names."""
    file_name = f"{name}_FILE"
    expected = f"expected the path of a readable file that holds {name}"
    try:
        text = Path(path).read_text(encoding="utf-8").strip()
    except FileNotFoundError:
        raise refuse(file_name, path, f"no such file ({expected})") from None
    except IsADirectoryError:
        raise refuse(file_name, path, f"not a file but a directory ({expected})") from None
    except PermissionError:
        raise refuse(file_name, path, f"this user (uid {os.getuid()}) may not read it ({expected})") from None
    except UnicodeDecodeError:
        raise refuse(file_name, path, "the file is not UTF-8 text") from None
    except OSError as error:
        raise refuse(file_name, path, f"cannot be read: {error.strerror} ({expected})") from None
    if not text:
        raise refuse(file_name, path, f"the file is empty ({expected}, or unset {file_name})")
    return text


def _text(name: str) -> str | None:
    """A string setting's value: the file ``NAME_FILE`` names wins over ``NAME`` itself."""
    path = env_value(f"{name}_FILE")
    return _file_text(name, path) if path is not None else env_value(name)


def env_str(name: str, default: str = "") -> str:
    """A free-form string setting (a key, a password, a list of headers), or ``NAME_FILE``'s contents."""
    value = _text(name)
    return default if value is None else value


def env_path(name: str, default: Path) -> Path:
    value = env_value(name)
    return default if value is None else Path(value)


def env_list(name: str, default: list[str]) -> list[str]:
    """A comma-separated list; blank items are dropped."""
    value = env_value(name)
    if value is None:
        return default
    return [item.strip() for item in value.split(",") if item.strip()]


def env_bool(name: str, default: bool) -> bool:
    """A switch: 1, true, yes, on or 0, false, no, off (any case); anything else is refused, since
    a misspelt "on" read as off would quietly turn a protection off."""
    value = env_value(name)
    if value is None:
        return default
    if value.lower() not in BOOLEANS:
        raise refuse(name, value, "expected one of 1, 0, true, false, yes, no, on, off (any case)")
    return BOOLEANS[value.lower()]


def _unit_hint(name: str, value: str) -> str:
    """For ``X_SECONDS=2m``: " (2m is 120)"; else nothing."""
    match = WITH_UNIT.fullmatch(value)
    unit = UNIT_SECONDS.get(match.group(2).lower()) if match and name.endswith("_SECONDS") else None
    if match is None or unit is None:
        return ""
    seconds = float(match.group(1)) * unit
    return f" ({value} is {int(seconds) if seconds.is_integer() else seconds})"


def _bounds(minimum: float | None, maximum: float | None) -> str:
    if minimum is not None and maximum is not None:
        return f"from {minimum:g} to {maximum:g}"
    if minimum is not None:
        return f"at least {minimum:g}"
    return "any" if maximum is None else f"at most {maximum:g}"


def env_int(name: str, default: int, *, minimum: int | None = None, maximum: int | None = None) -> int:
    """A whole number within ``minimum`` and ``maximum`` (either may be open). A ``_SECONDS``
    setting takes a plain number of seconds: ``1y`` is refused, saying how many seconds it means."""
    value = env_value(name)
    if value is None:
        return default
    expected = f"expected a whole number, {_bounds(minimum, maximum)}"
    if name.endswith("_SECONDS"):
        expected += ", in seconds with no unit"
    try:
        number = int(value)
    except ValueError:
        raise refuse(name, value, expected + _unit_hint(name, value)) from None
    if (minimum is not None and number < minimum) or (maximum is not None and number > maximum):
        raise refuse(name, value, expected)
    return number


def env_seconds(name: str, default: float, *, zero_allowed: bool = False) -> float:
    """A duration in seconds, fractions allowed and no unit (``2m`` is refused, saying ``120``);
    above 0, or 0 or more when ``zero_allowed`` (0 then means "at once" or "none")."""
    value = env_value(name)
    if value is None:
        return default
    expected = (
        "expected a number of seconds " + ("0 or more" if zero_allowed else "above 0") + ", with no unit"
    )
    try:
        seconds = float(value)
    except ValueError:
        raise refuse(name, value, expected + _unit_hint(name, value)) from None
    if not math.isfinite(seconds) or seconds < 0 or (seconds == 0 and not zero_allowed):
        raise refuse(name, value, expected)
    return seconds


def env_choice(name: str, default: str, choices: Sequence[str], *, any_case: bool = False) -> str:
    """One of ``choices``, returned as ``choices`` spells it (``any_case``: ``info`` is ``INFO``)."""
    value = _text(name)
    if value is None:
        return default
    for choice in choices:
        if value == choice or (any_case and value.lower() == choice.lower()):
            return choice
    raise refuse(name, value, f"expected one of {', '.join(choices)}" + (" (any case)" if any_case else ""))


def _password_masked(url: str) -> str:
    """``url`` as it may be shown: its password, if any, replaced by ``***``."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:
        return url.split("://", 1)[0] + "://… (not shown: it may hold a password)"
    if not password:
        return url
    credentials, _, host = parts.netloc.rpartition("@")
    user = credentials.split(":", 1)[0]
    return parts._replace(netloc=f"{user}:***@{host}").geturl()


def env_url(name: str, default: str, *, schemes: Collection[str], host_required: bool = True) -> str:
    """A URL whose scheme is one of ``schemes`` (and, when ``host_required``, that names a host),
    or ``NAME_FILE``'s contents. A refusal shows the URL with its password masked."""
    value = _text(name)
    if value is None:
        return default
    allowed = " or ".join(f"{scheme}://" for scheme in sorted(schemes))
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 — reading it is what checks it: a port that is not a number raises
    except ValueError as error:
        raise refuse(
            name, _password_masked(value), f"not a URL ({error}); expected a {allowed} URL"
        ) from None
    if parts.scheme.lower() not in schemes:
        raise refuse(name, _password_masked(value), f"expected a {allowed} URL")
    if host_required and not parts.hostname:
        raise refuse(name, _password_masked(value), f"expected a {allowed} URL that names a host")
    return value


def env_header(name: str, *, example: str) -> str:
    """A request header's name as the proxy sends it (``X-Forwarded-Proto``), not Django's
    ``HTTP_X_…`` form and not a ``name: value`` pair."""
    value = _text(name)
    if value is None:
        return ""
    if not HEADER_NAME.fullmatch(value):
        raise refuse(
            name, value, f"expected a header's name only, such as {example} (letters, digits, hyphens)"
        )
    return value


# --- start-up ------------------------------------------------------------------------------------

_one_line_installed = False


def refusals_print_as_one_line() -> None:
    """Have a :class:`SettingError` that nothing catches print as its one line and end the process
    (status 1), instead of a traceback that shows only the settings module reading the
    environment. Every other exception still goes to the hook there was."""
    global _one_line_installed
    if _one_line_installed:  # the settings module is imported again after a refusal
        return
    previous = sys.excepthook

    def hook(kind: type[BaseException], error: BaseException, trace: TracebackType | None) -> None:
        if isinstance(error, SettingError):
            sys.stderr.write(f"ImproperlyConfigured: {error}\n")
        else:
            previous(kind, error, trace)

    sys.excepthook = hook
    _one_line_installed = True


# --- what only a deployment checklist can say ------------------------------------------------------


@checks.register(checks.Tags.security, deploy=True)
def integrity_key_check(app_configs: Any, **kwargs: Any) -> list[checks.CheckMessage]:
    """``check --deploy``: an integrity key shorter than 32 characters, as Django's security.W009
    reports a short SECRET_KEY. A warning, not a refusal at start: a shorter key still seals and
    verifies, it is only easier to guess, and changing it breaks every existing seal."""
    if len(settings.INTEGRITY_KEY) >= INTEGRITY_KEY_MIN_LENGTH:
        return []
    return [
        checks.Warning(
            f"INTEGRITY_KEY has fewer than {INTEGRITY_KEY_MIN_LENGTH} characters: whoever guesses it can "
            "forge the records' seals.",
            hint=f"Set a random key of {INTEGRITY_KEY_MIN_LENGTH} or more characters (INTEGRITY_KEY or "
            "INTEGRITY_KEY_FILE) before the first record is written; see docs/deployment.md §5.",
            id="inspector.W001",
        )
    ]
