"""Warm start: a serving process loads what its first turn would otherwise load on its way.

The first turn of a fresh process paid for loading a tokenizer (about a second for
``o200k_base``: the counts every spliced prompt and every tool definition get), compiling the
profiles' chat templates, importing the loop's modules and, with the in-process demo model,
importing the URLconf its views are reached through (a worker imports no view otherwise: about
a second more), inside its first step. A web process
(``inspector/asgi.py``, the module daphne serves) and a Celery worker (``inspector/celery.py``,
``worker_process_init`` / ``worker_ready``) start :func:`start_in_background` instead: one
daemon thread that does this while the process waits for its first request or task. A turn that
needs a tokenizer the thread is still loading waits for that load rather than loading it twice
(``tokens.load_encodings`` takes one lock).

Only serving processes start it: ``manage.py`` commands and the tests never import those two
entry points' hooks with the setting on (``WARM_START``, default on; the tests' plugin turns it
off, see ``tests/workers.py``). The thread never raises: a database that is not there yet (a
worker started before ``migrate``) leaves out the profiles' encodings and templates, not the
stand-in encoding.
"""

from __future__ import annotations

import gc
import importlib
import logging
import os
import threading
import time
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from django.conf import settings
from django.db import DatabaseError, connections
from django.urls import Resolver404, resolve

from conversations.models import ModelProfile

logger = logging.getLogger(__name__)

# The modules a turn runs through (imported by the first turn otherwise).
TURN_MODULES = ("conversations.runner", "conversations.counting")
# The most profiles read (the encodings are a handful whatever their number; templates are
# compiled into a cache of 64).
PROFILES_READ = 200


@dataclass
class WarmStart:
    """What one warm start loaded, and how long it took."""

    encodings: list[str] = field(default_factory=list)
    templates: int = 0
    demo_model: bool = False
    seconds: float = 0.0
    problems: list[str] = field(default_factory=list)


_lock = threading.Lock()
_started_in: int | None = None
_done = threading.Event()
_report: WarmStart | None = None


@dataclass
class Needs:
    """What this installation's profiles make a turn load: encodings, chat templates, and the
    in-process demo model (a profile of it, if one is configured)."""

    encodings: set[str]
    templates: list[str]
    demo: ModelProfile | None
    problems: list[str]


def needed() -> Needs:
    """What the profiles need, and what could not be read. The tool-definition encoding (the
    server pages' counts, the demo model's stand-in) is always among the encodings."""
    from conversations.counting import TOOL_ENCODING
    from conversations.loop.splicing import choose_encoding

    encodings = {TOOL_ENCODING}
    templates: list[str] = []
    problems: list[str] = []
    try:
        profiles = list(ModelProfile.objects.order_by("-pk")[:PROFILES_READ])
    except DatabaseError as exc:
        problems.append(f"the model profiles could not be read ({type(exc).__name__}: {exc})")
        profiles = []
    for profile in profiles:
        named = [t for t in (profile.chat_templates or {}).values() if isinstance(t, str) and t.strip()]
        own = [profile.chat_template] if profile.chat_template.strip() else []
        templates.extend(own + named)
        chosen: list[str | None] = [*own, *named] or [None]
        for template in chosen:
            encoding, _ = choose_encoding(
                profile.model,
                template=template,
                special_tokens=profile.special_tokens if isinstance(profile.special_tokens, dict) else None,
                tokenizer=profile.tokenizer,
            )
            if encoding is not None:
                encodings.add(encoding)
    demo = next((profile for profile in profiles if profile.is_demo and not profile.base_url), None)
    return Needs(encodings, list(dict.fromkeys(templates)), demo, problems)


def _demo_model(profile: ModelProfile) -> None:
    """The in-process demo model answered through the app itself: its transport built and the
    URLconf loaded (a worker otherwise imports every view module at its first demo call)."""
    from conversations.loop.providers import PROVIDERS
    from conversations.runner import endpoint_for

    endpoint_for(profile)
    try:
        resolve(urlsplit(PROVIDERS[profile.provider].demo_base_url).path.rstrip("/") + "/")
    except Resolver404:
        pass


def warm_start() -> WarmStart:
    """Load the tokenizers, compile the chat templates and import the modules a turn needs, now
    (the background thread's work; callable directly). Never raises."""
    from conversations.loop.splicing.rendering import prepare_templates
    from conversations.loop.splicing.tokens import load_encodings

    started = time.perf_counter()
    report = WarmStart()
    try:
        for module in TURN_MODULES:
            importlib.import_module(module)
        needs = needed()
        report.problems = needs.problems
        report.encodings = sorted(load_encodings(sorted(needs.encodings)))
        report.templates = prepare_templates(needs.templates)
        if needs.demo is not None:
            _demo_model(needs.demo)
            report.demo_model = True
    except Exception as exc:  # noqa: BLE001 — a warm start that fails leaves the first turn cold, no more
        report.problems.append(f"{type(exc).__name__}: {exc}")
    finally:
        connections.close_all()  # this thread's own: it reads nothing more
    report.seconds = time.perf_counter() - started
    return report


def _run(reason: str) -> None:
    global _report
    report = warm_start()
    # What the warm start loaded is kept for the process's life: out of the collector's walk.
    gc.collect()
    gc.freeze()
    _report = report
    _done.set()
    logger.info(
        "warm start (%s): tokenizers %s, %d chat templates%s in %.2f s%s",
        reason,
        ", ".join(report.encodings) or "none",
        report.templates,
        ", the demo model" if report.demo_model else "",
        report.seconds,
        "; " + "; ".join(report.problems) if report.problems else "",
    )


def start_in_background(reason: str) -> threading.Thread | None:
    """Start the warm start on a daemon thread, once per process (a forked child starts its own),
    unless ``WARM_START`` is off; returns the thread, or None when none was started."""
    global _started_in, _report
    if not getattr(settings, "WARM_START", True):
        return None
    with _lock:
        if _started_in == os.getpid():
            return None
        _started_in = os.getpid()
        _done.clear()
        _report = None
        thread = threading.Thread(target=_run, args=(reason,), name="warm-start", daemon=True)
        thread.start()
    return thread


def wait(timeout: float | None = None) -> WarmStart | None:
    """The report of this process's warm start once it has finished (None: not started, or not
    finished within ``timeout`` seconds)."""
    if _started_in != os.getpid() or not _done.wait(timeout):
        return None
    return _report
