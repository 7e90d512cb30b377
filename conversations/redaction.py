"""Redaction at write time: secrets never reach the database, an export or a page.

Built-in patterns catch API keys, bearer tokens and e-mail addresses; staff add their own
regexes (``RedactionRule``); the exact values of secrets the run itself used (the model's API
key, ``${VAR}`` values given to servers) are always replaced. The original is not kept: the
stored text carries a visible marker such as ``[REDACTED:email]`` instead.

One redactor for everything written: ``conversations.secret_sources.active_redactor`` builds it with
every configured secret value (each model profile's key, every server's sealed and ``${VAR}``
env and header values) and makes it this process's ``current()`` one, which the log filter
(``LogRedactionFilter``, installed in ``settings.LOGGING``) applies to every log record. This
module imports no models: logging is configured before Django's apps are loaded.
"""

from __future__ import annotations

import functools
import json
import logging
import re
import threading
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass

from conversations.typealias import JSONValue

# An e-mail address. Its local part is the whole run of local-part characters before the "@": it
# starts where no such character precedes it, not at any word boundary (tried from each boundary of
# a run like "a.a.a…" that ends in no address, the run was scanned to its end each time: time
# quadratic in its length, minutes for a megabyte a host, server or model sends). So an address
# whose local part starts inside the previous one's domain run ("a@b.io-c@d.io", "a@b.io@c.io")
# is matched as part of that one.
_EMAIL_LOCAL = r"[A-Za-z0-9._%+\-]"
_EMAIL_AT_DOMAIN = r"@[A-Za-z0-9.\-]+\.[A-Za-z]{2,}\b"
_EMAIL = rf"(?<!{_EMAIL_LOCAL}){_EMAIL_LOCAL}+{_EMAIL_AT_DOMAIN}(?:{_EMAIL_LOCAL}*{_EMAIL_AT_DOMAIN})*"

BUILTIN_PATTERNS: tuple[tuple[str, str], ...] = (
    (
        "api_key",
        r"\b(?:sk-(?:proj-|ant-(?:api\d+-)?)?[A-Za-z0-9_\-]{20,}"
        r"|AKIA[0-9A-Z]{16}"
        r"|gh[pousr]_[A-Za-z0-9]{30,}"
        r"|xox[abprs]-[A-Za-z0-9-]{10,}"
        r"|AIza[0-9A-Za-z_\-]{35})",
    ),
    ("bearer_token", r"(?i)\bbearer\s+[A-Za-z0-9._~+/=\-]{8,}"),
    ("email", _EMAIL),
    # This installation's recording-proxy keys (``conversations.proxy.keys``): a host may send one
    # anywhere (a URL it echoes, a prompt), and no route is trusted to have named it.
    ("proxy_key", r"\btci_[A-Za-z0-9_\-]{43}"),
)


# Screens: a test a text must pass for a built-in pattern to be able to match it, far cheaper
# than the pattern over a long body (a text that fails is not scanned by that pattern at all).
# Each is a necessary condition, never a sufficient one. Literal searches by ``re`` scan for
# their first character in C; four of them cost less than nine ``in`` tests of the api_key
# prefixes (a multi-character ``in`` is several times slower per byte than ``re``'s search
# for a literal), and one alternation of them all is slower still.
_API_KEY_SEARCHES = tuple(
    re.compile(prefix).search for prefix in ("sk-", "xox", "gh[pousr]_", "A(?:KIA|Iza)")
)


def _may_hold_api_key(text: str) -> bool:
    # A plain loop, not ``any`` over a generator: most texts are short (a header, a title), where
    # making and resuming the generator cost more than the four searches.
    for search in _API_KEY_SEARCHES:
        if search(text):
            return True
    return False


def _may_hold_bearer(text: str) -> bool:
    # No character outside ASCII matches a letter of "bearer" regardless of case (checked over
    # all of Unicode by the tests), so lower-casing ASCII letters is enough; a non-ASCII ``str``
    # lower-cases several times slower than its UTF-8 bytes do.
    if text.isascii():
        return "bearer" in text.lower()
    return b"bearer" in text.encode("utf-8", "surrogatepass").lower()


def _may_hold_email(text: str) -> bool:
    return "@" in text


def _may_hold_proxy_key(text: str) -> bool:
    return "tci_" in text


_BUILTIN_SCREENS: dict[str, Callable[[str], bool]] = {
    "api_key": _may_hold_api_key,
    "bearer_token": _may_hold_bearer,
    "email": _may_hold_email,
    "proxy_key": _may_hold_proxy_key,
}


def marker(name: str) -> str:
    return f"[REDACTED:{name}]"


@dataclass(frozen=True)
class Redactor:
    """Replaces every match of its patterns (and every known secret value) with a marker."""

    patterns: tuple[tuple[str, re.Pattern[str]], ...]
    secrets: tuple[str, ...] = ()
    # Per pattern (same order): a test a text must pass for the pattern to match it (None, or
    # past the end: always scan).
    screens: tuple[Callable[[str], bool] | None, ...] = ()

    def text(self, value: str) -> str:
        if not value:
            return value
        for secret in self.secrets:
            if secret in value:
                value = value.replace(secret, marker("secret"))
        screens = self.screens
        for index, (name, pattern) in enumerate(self.patterns):
            screen = screens[index] if index < len(screens) else None
            if screen is not None and not screen(value):
                continue
            value = pattern.sub(marker(name), value)
        return value

    def json(self, value: JSONValue) -> JSONValue:
        """The same JSON value with every string (keys kept) redacted: a copy, or ``value``
        itself when no string in it can change (``_untouched``)."""
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list | dict) and self._untouched(value):
            return value
        return self._walk(value)

    def _walk(self, value: JSONValue) -> JSONValue:
        if isinstance(value, str):
            return self.text(value)
        if isinstance(value, list):
            return [self._walk(item) for item in value]
        if isinstance(value, dict):
            return {key: self._walk(item) for key, item in value.items()}
        return value

    def _untouched(self, value: JSONValue) -> bool:
        """Whether no string in ``value`` can be changed, told from its JSON text at C speed
        instead of a Python call per string (a tool list, a transcript: hundreds of them).

        Each string of ``value`` is a part of that text, written character by character (a
        character JSON escapes becomes its escape sequence), so a secret in a string leaves its
        own JSON form in the text, and each screen — a search for literals JSON never escapes —
        passes the text if it passes any string in it. So when no screen passes and no secret's
        JSON form is found, no string can change. A pattern without a screen (a staff rule: its
        regex may anchor to a string's start or end, which the text does not show) or a value
        that is not plain JSON always takes the walk over every string."""
        screens = [screen for screen in self.screens if screen is not None]
        if len(screens) < len(self.patterns):
            return False
        try:
            text = json.dumps(value, ensure_ascii=False, check_circular=False)
        except (TypeError, ValueError, RecursionError):
            return False
        if any(screen(text) for screen in screens):
            return False
        return not any(secret in text for secret in self._json_secrets)

    @functools.cached_property
    def _json_secrets(self) -> tuple[str, ...]:
        """Each secret as it reads inside a JSON string (its escapes, without the quotes)."""
        return tuple(json.dumps(secret, ensure_ascii=False)[1:-1] for secret in self.secrets)


def redactor(*, rules: Iterable[tuple[str, str]] = (), secrets: Sequence[str] = ()) -> Redactor:
    """A redactor with the built-in patterns, the given ``(name, regex)`` rules and secret values.

    Secrets shorter than 6 characters are ignored (replacing "a" everywhere would destroy the
    record and protect nothing). Invalid regexes are rejected where rules are saved, not here.
    """
    compiled = tuple((name, re.compile(regex)) for name, regex in (*BUILTIN_PATTERNS, *rules))
    usable = tuple(sorted({s for s in secrets if len(s) >= 6}, key=len, reverse=True))
    screens = tuple(_BUILTIN_SCREENS[name] for name, _ in BUILTIN_PATTERNS)
    return Redactor(compiled, usable, screens)


_current: Redactor | None = None
_current_lock = threading.Lock()


def current() -> Redactor:
    """The process's latest full redactor (the built-in patterns alone until one was built)."""
    found = _current
    if found is None:
        found = redactor()
        remember(found)
    return found


def remember(found: Redactor) -> None:
    """Make ``found`` the process's ``current()`` redactor, keeping the secrets the current one
    knows (a redactor built for one run must not make the log filter forget another's)."""
    global _current
    with _current_lock:
        known = _current.secrets if _current is not None else ()
        secrets = tuple(sorted({*known, *found.secrets}, key=len, reverse=True))
        _current = Redactor(found.patterns, secrets, found.screens)


class LogRedactionFilter(logging.Filter):
    """Redacts every log record's message (arguments merged) and exception text in place.

    Never drops a record. The message is formatted here once (``record.getMessage()``) and the
    arguments cleared, so a handler cannot re-format an unredacted argument.
    """

    def filter(self, record: logging.LogRecord) -> bool:
        redact = current()
        try:
            message = record.getMessage()
        except Exception:  # noqa: BLE001 — a bad format string is logged as it came, redacted
            message = str(record.msg)
        record.msg = redact.text(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = logging.Formatter().formatException(record.exc_info)
        if record.exc_text:
            record.exc_text = redact.text(record.exc_text)
            # The handler formats exc_text when exc_info is set, and exc_info itself otherwise.
        if record.stack_info:
            record.stack_info = redact.text(record.stack_info)
        return True
