"""Warm start: a serving process loads the tokenizers and chat templates its turns need at
start-up, in the background, so its first turn does not (conversations/warm_start.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator

import pytest
from celery.signals import worker_process_init
from django.conf import settings as django_settings
from pytest_django.fixtures import Settings

from conversations import warm_start
from conversations.counting import TOOL_ENCODING
from conversations.loop.splicing.tokens import load_encodings, loaded_encodings
from conversations.models import ModelProfile
from conversations.services import demo_profile_ensure
from tests.conftest import REPO_ROOT

LLAMA_TEMPLATE = "<|begin_of_text|>{% for m in messages %}<|start_header_id|>{{ m.role }}{% endfor %}"

# A fresh process as daphne starts it: Django set up, then the ASGI module imported; it prints
# what its warm start reports, and which tokenizers are loaded, before any turn has run.
FRESH_WEB_PROCESS = """
import json, os
import django
django.setup()
import inspector.asgi
from conversations import warm_start
from conversations.loop.splicing.tokens import loaded_encodings
report = warm_start.wait(120)
print(json.dumps({
    "report": None if report is None else report.encodings,
    "loaded": sorted(loaded_encodings()),
}))
"""


def _fresh_web_process(warm: bool) -> dict[str, list[str] | None]:
    env = {**os.environ, "WARM_START": "1" if warm else "0", "VAR_DIR": str(django_settings.VAR_DIR)}
    done = subprocess.run(
        [sys.executable, "-c", FRESH_WEB_PROCESS],
        cwd=REPO_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=170,
        check=True,
    )
    result: dict[str, list[str] | None] = json.loads(done.stdout.strip().splitlines()[-1])
    return result


def test_a_fresh_web_process_has_loaded_the_tokenizer_before_any_turn() -> None:
    warm = _fresh_web_process(warm=True)
    cold = _fresh_web_process(warm=False)

    assert warm["report"] is not None and TOOL_ENCODING in warm["report"]
    assert warm["loaded"] is not None and TOOL_ENCODING in warm["loaded"]
    # Off, nothing loads a tokenizer at start-up: the first count of a turn would.
    assert cold == {"report": None, "loaded": []}


@pytest.fixture
def fresh_warm_start(settings: Settings) -> Iterator[None]:
    """The warm start as if this process had not run it yet (it runs once per process)."""
    settings.WARM_START = True
    warm_start._started_in = None
    yield
    warm_start.wait(120)
    warm_start._started_in = None


@pytest.mark.django_db(transaction=True)
@pytest.mark.usefixtures("fresh_warm_start")
def test_a_worker_process_loads_every_profiles_tokenizer_and_compiles_its_templates() -> None:
    ModelProfile.objects.create(name="by setting", provider="openai_chat", model="x", tokenizer="cl100k_base")
    ModelProfile.objects.create(
        name="by template", provider="openai_chat", model="local", chat_template=LLAMA_TEMPLATE
    )
    demo_profile_ensure()

    # What a prefork pool's child hears when it starts (a threads pool's worker: worker_ready).
    worker_process_init.send(sender=None)
    report = warm_start.wait(120)

    assert report is not None and report.problems == []
    assert {TOOL_ENCODING, "cl100k_base", "llama3.1"} <= set(report.encodings)
    assert {TOOL_ENCODING, "cl100k_base", "llama3.1"} <= loaded_encodings()
    # The Llama profile's template and the demo's own (Qwen2.5-Instruct's, which the demo reads).
    assert report.templates == 2
    assert "qwen3" in report.encodings  # the demo profile's tokenizer
    # The in-process demo model's way in (its transport, the URLconf) is ready too.
    assert report.demo_model


def test_off_nothing_is_started(settings: Settings) -> None:
    settings.WARM_START = False
    assert warm_start.start_in_background("web") is None


def test_an_unknown_encoding_is_left_out_not_raised() -> None:
    assert load_encodings(["no-such-encoding", TOOL_ENCODING]) == [TOOL_ENCODING]
