"""Token counts of a spliced prompt: which tokenizer reads a model's prompt, and the counts under it.

Counts come from ``quicktok`` (offline BPE tokenizers shipped in its wheel). A model is mapped to
an encoding by its name (:func:`encoding_for`); a model with no known encoding gets no counts and
a note saying so, never a character-based estimate. What is counted (the prompt, each tool
definition, each tool result) is text the templates produced
(:mod:`conversations.splicing.templates`); this module knows tokenizers only.

Pure Python: no Django, no I/O beyond loading the tokenizers quicktok ships.
"""

from __future__ import annotations

import functools
import importlib
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = ["TokenReport", "count_tokens", "encoding_for", "token_report"]


@dataclass
class TokenReport:
    """Token counts of one spliced prompt, named by encoding.

    ``prompt``/``tools``/``results`` are empty (None, {}, []) when ``encoding`` is None or the
    tokenizer could not be loaded; ``note`` then says why. Counts recognise the encoding's
    special-token strings (``<|im_start|>`` is one token for Qwen), as a serving engine does when
    it tokenizes a rendered template.
    """

    encoding: str | None
    prompt: int | None
    tools: dict[str, int] = field(default_factory=dict)
    results: list[int] = field(default_factory=list)
    note: str = ""


class _Encoding(Protocol):
    """The part of ``quicktok.Tokenizer`` used here (quicktok ships no type information)."""

    def encode_with_special(self, text: str) -> list[int]: ...


# Prefix rules, checked before quicktok's own table: its prefix matching sends "gpt-4.1" to
# cl100k_base (as "gpt-4" + ".") although the 4.1 family uses o200k_base. First match wins.
_MODEL_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), encoding)
    for pattern, encoding in (
        (r"gpt-oss", "o200k_harmony"),
        (r"(chatgpt-4o|gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5)", "o200k_base"),
        (r"(o1|o3|o4)(\b|$)", "o200k_base"),
        (r"(gpt-4|gpt-3\.5|gpt-35)", "cl100k_base"),
        (r"(llama-3|llama3|meta-llama-3)", "llama3"),
        # Qwen2, 2.5 and 3 share one BPE vocabulary; QwQ is built on Qwen2.5.
        (r"(qwen|qwq)", "qwen3"),
    )
)
# The demo model is no language model and has no tokenizer. o200k_base is this project's
# choice so a class still sees real counts; the note says it is a stand-in.
_DEMO_MODEL = "demo"
_DEMO_ENCODING = "o200k_base"


def _quicktok_table() -> dict[str, str]:
    """quicktok's ``MODEL_TO_ENCODING`` (empty if the package lacks it)."""
    module = importlib.import_module("quicktok")
    table = getattr(module, "MODEL_TO_ENCODING", {})
    if not isinstance(table, dict):
        return {}
    return {str(name).lower(): str(encoding) for name, encoding in table.items()}


def _normalise_model(model: str) -> str:
    """``"ft:gpt-4o-mini:org::x"`` → ``"gpt-4o-mini:org::x"``; ``"Qwen/Qwen2.5-7B"`` → ``"qwen2.5-7b"``."""
    name = model.strip().lower()
    if name.startswith("ft:"):
        name = name[3:]
    return name.rsplit("/", 1)[-1]


def encoding_for(model: str) -> str | None:
    """The quicktok encoding of ``model``, or None when none is known (then nothing is counted).

    Order: the demo model (→ o200k_base, a stand-in), this module's prefix rules (gpt-oss →
    o200k_harmony; gpt-4o/4.1/4.5/5, o1/o3/o4 → o200k_base; gpt-4/3.5 → cl100k_base; llama-3 →
    llama3; qwen/qwq → qwen3), then quicktok's ``MODEL_TO_ENCODING`` (exact name, or the name
    followed by ``-`` or ``.``). Org prefixes (``Qwen/…``) and ``ft:`` are ignored.
    """
    name = _normalise_model(model)
    if not name:
        return None
    if name == _DEMO_MODEL:
        return _DEMO_ENCODING
    for pattern, encoding in _MODEL_RULES:
        if pattern.match(name):
            return encoding
    for known, encoding in sorted(_quicktok_table().items(), key=lambda item: -len(item[0])):
        if name == known or name.startswith((known + "-", known + ".")):
            return encoding
    return None


@functools.cache
def _encoding(name: str) -> _Encoding:
    """A loaded tokenizer, cached for the process (loading one takes about half a second)."""
    module = importlib.import_module("quicktok")
    encoding: _Encoding = module.get_encoding(name)
    return encoding


def count_tokens(text: str, encoding: str) -> int:
    """Tokens in ``text`` under the quicktok ``encoding``.

    Special-token strings of the encoding count as one token each, as when a serving engine
    tokenizes a rendered template. Raises whatever quicktok raises for an unknown encoding.
    """
    return len(_encoding(encoding).encode_with_special(text))


def token_report(
    text: str,
    *,
    model: str,
    tools: Mapping[str, str],
    results: Sequence[str],
    exact: bool,
    how: str = "",
) -> TokenReport:
    """The counts of one spliced prompt under ``model``'s encoding (see :class:`TokenReport`).

    ``text`` is the whole prompt; ``tools`` each tool's definition text by tool name, and
    ``results`` each tool result's text, as the prompt splices them; ``exact`` says whether
    ``text`` is the model's real prompt (the note says so when it is not); ``how`` says how the
    pieces were found (added to the note). Never raises: a
    tokenizer that fails gives no counts and a note saying why.
    """
    encoding = encoding_for(model)
    if encoding is None:
        return TokenReport(None, None, {}, [], f"no tokenizer is known for model {model!r}; counts not shown")
    try:
        prompt = count_tokens(text, encoding)
        tool_counts = {name: count_tokens(definition, encoding) for name, definition in tools.items()}
        result_counts = [count_tokens(result, encoding) for result in results]
    except Exception as exc:  # noqa: BLE001 — a tokenizer that fails must not hide the prompt
        return TokenReport(
            encoding,
            None,
            {},
            [],
            f"the {encoding} tokenizer failed ({type(exc).__name__}: {exc}); counts not shown",
        )
    notes = [f"counted with {encoding} (quicktok)"]
    if _normalise_model(model) == _DEMO_MODEL:
        notes.append(f"the demo model has no tokenizer; {encoding} is this app's stand-in")
    if not exact:
        notes.append("the prompt total is of this illustrative rendering")
    if how and (tool_counts or result_counts):
        notes.append(how)
    return TokenReport(encoding, prompt, tool_counts, result_counts, "; ".join(notes))
