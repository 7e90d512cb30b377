"""The secret values the one redactor knows, and that redactor (``active_redactor``).

This app knows its own secrets (each model profile's key); an app that keeps others registers a
source of them here when Django starts (``servers`` does, for its servers' sealed and ``${VAR}``
env and header values: ``servers.apps``), so that nothing here imports it.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Sequence

from django.conf import settings

from conversations.models import ModelProfile, RedactionRule
from conversations.redaction import Redactor, redactor, remember

# A source gives every secret value it holds that can be resolved here (unresolvable ones left out).
SecretSource = Callable[[], Iterable[str]]

_sources: list[SecretSource] = []


def secret_source_register(source: SecretSource) -> None:
    """Have ``configured_secrets`` ask ``source`` too (once, however often it is registered)."""
    if source not in _sources:
        _sources.append(source)


def configured_secrets() -> list[str]:
    """Every secret value this installation is configured with: each model profile's key (from
    the environment variable it names, or one the app provides), then every registered source's
    values. Values that cannot be resolved here are left out."""
    secrets: list[str] = []
    names = ModelProfile.objects.exclude(api_key_env="").order_by().values_list("api_key_env", flat=True)
    for name in names.distinct():
        value = os.environ.get(name) or settings.BUILTIN_API_KEYS.get(name, "")
        if value:
            secrets.append(value)
    for source in _sources:
        secrets.extend(source())
    return secrets


def active_redactor(*, secrets: Sequence[str] = ()) -> Redactor:
    """The one redactor for what is written: the built-in patterns, the enabled staff rules,
    every configured secret value (``configured_secrets``) and ``secrets`` (values of this run).
    It also becomes the process's ``redaction.current()`` one, which the log filter applies."""
    rules = RedactionRule.objects.filter(enabled=True).values_list("name", "pattern")
    built = redactor(rules=list(rules), secrets=[*configured_secrets(), *secrets])
    remember(built)
    return built
