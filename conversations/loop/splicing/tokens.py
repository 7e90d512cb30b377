"""Token counts of a spliced prompt: which tokenizer reads a model's prompt, and the counts under it.

Counts come from ``quicktok`` (offline BPE tokenizers shipped in its wheel). A model is mapped to
an encoding by its name (:func:`encoding_for`); a model with no known encoding gets no counts and
a note saying so, never a character-based estimate. What is counted (the prompt, each tool
definition, each tool result) is text the templates produced
(:mod:`conversations.loop.splicing.templates`); this module knows tokenizers only.

Pure Python: no Django, no I/O beyond loading the tokenizers quicktok ships.
"""

from __future__ import annotations

import functools
import importlib
import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Protocol

__all__ = [
    "ENCODINGS",
    "TokenReport",
    "choose_encoding",
    "count_tokens",
    "encoding_for",
    "load_encodings",
    "loaded_encodings",
    "token_report",
]


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

    special_tokens_set: set[str]

    def encode_ordinary(self, text: str) -> list[int]: ...


# Prefix rules, checked before quicktok's own table: its prefix matching sends "gpt-4.1" to
# cl100k_base (as "gpt-4" + ".") although the 4.1 family uses o200k_base. First match wins.
_MODEL_RULES: tuple[tuple[re.Pattern[str], str], ...] = tuple(
    (re.compile(pattern), encoding)
    for pattern, encoding in (
        (r"gpt-oss", "o200k_harmony"),
        (r"(chatgpt-4o|gpt-4o|gpt-4\.1|gpt-4\.5|gpt-5)", "o200k_base"),
        (r"(o1|o3|o4)(\b|$)", "o200k_base"),
        (r"(gpt-4|gpt-3\.5|gpt-35)", "cl100k_base"),
        # 3.1, 3.2 and 3.3 share 3.0's BPE vocabulary but not its special tokens (see _DERIVED).
        (r"(meta-)?llama-?3\.[1-9]", "llama3.1"),
        (r"hermes-3", "llama3.1"),  # every Hermes 3 is built on Llama 3.1 or 3.2
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


@functools.lru_cache(maxsize=256)
def encoding_for(model: str) -> str | None:
    """The quicktok encoding of ``model``, or None when none is known (then nothing is counted).

    Order: the demo model (→ o200k_base, a stand-in), this module's prefix rules (gpt-oss →
    o200k_harmony; gpt-4o/4.1/4.5/5, o1/o3/o4 → o200k_base; gpt-4/3.5 → cl100k_base; llama-3.1,
    3.2, 3.3 and hermes-3 → llama3.1; llama-3 → llama3; qwen/qwq → qwen3), then quicktok's
    ``MODEL_TO_ENCODING`` (exact name, or the name followed by ``-`` or ``.``). Org prefixes
    (``Qwen/…``) and ``ft:`` are ignored.
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


# Loaded tokenizers, for the process (loading one takes half a second to a second). One lock:
# a turn asking for a tokenizer the warm start is loading waits for it rather than loading it twice.
_LOADED: dict[str, _Encoding] = {}
_LOADING = threading.Lock()


def _encoding(name: str) -> _Encoding:
    """A loaded tokenizer, cached for the process."""
    found = _LOADED.get(name)
    if found is not None:
        return found
    with _LOADING:
        found = _LOADED.get(name)
        if found is None:
            module = importlib.import_module("quicktok")
            found = module.get_encoding(name)
            _LOADED[name] = found
        return found


def load_encodings(names: Iterable[str]) -> list[str]:
    """Load the tokenizers of ``names`` (encodings as :func:`count_tokens` takes them) ahead of
    any count, so the first count of a process does not pay for loading; returns those that were
    (or already had been) loaded. A name quicktok does not know is left out, never raised."""
    loaded = []
    for name in names:
        try:
            _encoding(_DERIVED.get(name, (name, (), ()))[0])
        except Exception:  # noqa: BLE001 — an unknown or broken tokenizer is counted without, later
            continue
        loaded.append(name)
    return loaded


def loaded_encodings() -> frozenset[str]:
    """The encodings whose tokenizer this process has loaded (an encoding derived from a loaded
    one, ``llama3.1`` over ``llama3``, counts as loaded)."""
    bases = set(_LOADED)
    return frozenset(bases | {name for name, (base, _, _) in _DERIVED.items() if base in bases})


# Encodings built here over a quicktok one (docs/chat-templates.md §5): Llama 3.1 kept Llama 3.0's
# BPE vocabulary and renamed some reserved special tokens. 3.0's reserved_special_token_2 (id
# 128004), _4 (128008) and _5 (128010) became <|finetune_right_pad_id|>, <|eom_id|> and
# <|python_tag|>; the remaining reserved tokens were renumbered, so 3.1 has 248 of them (0–247)
# where 3.0 had 251 (0–250).
_LLAMA_31_ADDED = ("<|finetune_right_pad_id|>", "<|eom_id|>", "<|python_tag|>")
_LLAMA_31_DROPPED = tuple(f"<|reserved_special_token_{n}|>" for n in (248, 249, 250))
_DERIVED = {"llama3.1": ("llama3", _LLAMA_31_ADDED, _LLAMA_31_DROPPED)}
ENCODINGS = ("o200k_base", "o200k_harmony", "cl100k_base", "llama3", "llama3.1", "qwen3")


def count_tokens(text: str, encoding: str, added: Sequence[str] = ()) -> int:
    """Tokens in ``text`` under ``encoding`` (a quicktok encoding, or ``llama3.1``).

    Special-token strings of the encoding count as one token each, as when a serving engine
    tokenizes a rendered template; so do the strings in ``added`` (a tokenizer's added tokens:
    a tokenizer splits them out before its BPE runs). Raises whatever quicktok raises for an
    unknown encoding.
    """
    base, extra, dropped = _DERIVED.get(encoding, (encoding, (), ()))
    tokenizer = _encoding(base)
    specials = _special_tokens(base)
    singles = sorted({*extra, *added} - {""}, key=len, reverse=True)
    if not singles and not dropped:
        return _with_special(tokenizer, specials, text)
    pattern = "(" + "|".join(re.escape(token) for token in [*singles, *dropped]) + ")"
    total = 0
    for index, piece in enumerate(re.split(pattern, text)):
        if not piece:
            continue
        if index % 2 == 0:
            total += _with_special(tokenizer, specials, piece)
        elif piece in dropped and piece not in singles:
            total += len(tokenizer.encode_ordinary(piece))  # plain text in this encoding
        else:
            total += 1
    return total


@functools.cache
def _special_tokens(base: str) -> re.Pattern[str] | None:
    """The special-token strings of the encoding ``base`` as one pattern, longest first (None:
    it has none)."""
    tokens = sorted(_encoding(base).special_tokens_set, key=len, reverse=True)
    return re.compile("|".join(re.escape(token) for token in tokens)) if tokens else None


def _with_special(tokenizer: _Encoding, specials: re.Pattern[str] | None, text: str) -> int:
    """Tokens of ``text`` with each of the encoding's special-token strings one token: the same
    count as quicktok's ``encode_with_special``, whose work grows with the text times the special
    tokens in it (it scans the rest again after each one; a long conversation's prompt holds two
    a message). Here they are split out once and only the plain text between them is encoded."""
    if specials is None:
        return len(tokenizer.encode_ordinary(text))
    total = 0
    start = 0
    for match in specials.finditer(text):
        if match.start() > start:
            total += len(tokenizer.encode_ordinary(text[start : match.start()]))
        total += 1
        start = match.end()
    if start < len(text):
        total += len(tokenizer.encode_ordinary(text[start:]))
    return total


# Template families that identify a tokenizer (docs/chat-templates.md §5): a marker only that
# family's templates print, and its encoding (None: no offline implementation here, with the
# reason). ChatML (<|im_start|>) is not one: Qwen, Hermes (on Llama 3.1, Llama 3, Mistral), Yi
# and others all use it, so the tokens and the model's name decide (_chatml_encoding).
_FAMILIES: tuple[tuple[tuple[str, ...], str | None, str], ...] = (
    (("<|channel|>", "<|start|>"), "o200k_harmony", "gpt-oss (harmony)"),
    (
        ("<｜begin▁of▁sentence｜>", "<｜Assistant｜>"),
        None,
        "DeepSeek: its tokenizer has no offline implementation here",
    ),
    (
        ("[INST]", "[AVAILABLE_TOOLS]"),
        None,
        "Mistral: its Tekken tokenizer has no offline implementation here",
    ),
    (("<|start_header_id|>", "<|begin_of_text|>"), "llama3.1", "Llama 3.1+"),
)
_CHATML = "<|im_start|>"
_CHATML_FAMILY = "the chat template's family (ChatML, which many model families use)"
# What a configured bos_token says of the vocabulary under a template (Qwen configures none).
_BOS_TOKENS: dict[str, tuple[str | None, str]] = {
    "<|begin_of_text|>": ("llama3.1", "Llama 3.1+"),
    "<｜begin▁of▁sentence｜>": (None, "DeepSeek: its tokenizer has no offline implementation here"),
    "<s>": (None, "a SentencePiece vocabulary (Mistral, Llama 2) with no offline implementation here"),
}
# Searched anywhere in a ChatML model's name (fine-tunes carry their base's name inside theirs).
# Every Hermes 3 is built on Llama 3.1 or 3.2; first match wins.
_CHATML_NAMES: tuple[tuple[re.Pattern[str], str | None, str], ...] = tuple(
    (re.compile(pattern), encoding, label)
    for pattern, encoding, label in (
        (r"llama-?3\.[1-9]|hermes-3", "llama3.1", "Llama 3.1+"),
        (r"llama-?3", "llama3", "Llama 3"),
        (r"qwen|qwq", "qwen3", "Qwen"),
        (r"mistral|mixtral", None, "Mistral: its tokenizer has no offline implementation here"),
    )
)


def _chatml_encoding(model: str) -> tuple[str | None, str]:
    """A ChatML template's encoding when its tokens name none: the model's name, else Qwen's."""
    name = _normalise_model(model)
    for pattern, encoding, label in _CHATML_NAMES:
        if pattern.search(name):
            return encoding, f"{_CHATML_FAMILY} and the model's name ({label})"
    by_name = encoding_for(model) if name != _DEMO_MODEL else None
    if by_name is not None:
        return by_name, f"{_CHATML_FAMILY} and the model's name"
    return "qwen3", f"{_CHATML_FAMILY}: nothing else names a tokenizer, so Qwen's is assumed"


def choose_encoding(
    model: str,
    *,
    template: str | None = None,
    special_tokens: Mapping[str, str] | None = None,
    tokenizer: str = "",
) -> tuple[str | None, str]:
    """``(encoding, why)`` for a prompt (docs/chat-templates.md §5), first that applies:

    1. the profile's ``tokenizer`` setting;
    2. the family of the chat template the engine applied, when it identifies a tokenizer
       (Llama 3 header tokens, Mistral, DeepSeek, gpt-oss);
    3. the configured ``bos_token`` (``<|begin_of_text|>`` → Llama 3.1+: Hermes 3 is ChatML on
       Llama 3.1);
    4. for a ChatML template, the model's name, else Qwen's tokenizer (the note says it was
       assumed);
    5. the model's name (:func:`encoding_for`).

    ``encoding`` is None when none applies; ``why`` then says so."""
    if tokenizer:
        return tokenizer, "the profile's tokenizer setting"
    if template:
        for markers, encoding, family in _FAMILIES:
            if any(marker in template for marker in markers):
                if encoding is None:
                    return None, f"the chat template's family is {family}"
                return encoding, f"the chat template's family ({family})"
        bos = (special_tokens or {}).get("bos_token")
        if isinstance(bos, str) and bos in _BOS_TOKENS:
            encoding, label = _BOS_TOKENS[bos]
            family = _CHATML_FAMILY if _CHATML in template else "the chat template"
            why = f"{family} and its configured bos_token {bos} ({label})"
            return encoding, why if encoding is not None else f"the configured bos_token is {bos}: {label}"
        if _CHATML in template:
            return _chatml_encoding(model)
    encoding = encoding_for(model)
    if encoding is None:
        return None, f"no tokenizer is known for model {model!r}"
    return encoding, "the model's name"


def token_report(
    text: str,
    *,
    model: str,
    tools: Mapping[str, str],
    results: Sequence[str],
    exact: bool,
    as_sent: bool = False,
    how: str = "",
    template: str | None = None,
    special_tokens: Mapping[str, str] | None = None,
    tokenizer: str = "",
    added_tokens: Sequence[str] = (),
) -> TokenReport:
    """The counts of one spliced prompt under ``model``'s encoding (see :class:`TokenReport`).

    ``text`` is the whole prompt; ``tools`` each tool's definition text by tool name, and
    ``results`` each tool result's text, as the prompt splices them; ``exact`` says whether
    ``text`` is the model's real prompt (the note says so when it is not; ``as_sent``: it is the
    messages as sent, without the provider's chat markup); ``how`` says how the
    pieces were found (added to the note); ``added_tokens`` are the tokenizer's added tokens (from
    its config), each counted as one token like the special tokens. Never raises: a
    tokenizer that fails gives no counts and a note saying why.
    """
    encoding, why = choose_encoding(
        model, template=template, special_tokens=special_tokens, tokenizer=tokenizer
    )
    if encoding is None:
        return TokenReport(None, None, {}, [], f"{why}; counts not shown")
    # The configured special tokens are tokens of the model's vocabulary by definition.
    added = [value for value in (special_tokens or {}).values() if isinstance(value, str)]
    extra = sorted({token for token in added_tokens if isinstance(token, str) and token})
    added.extend(extra)
    try:
        prompt = count_tokens(text, encoding, added)
        tool_counts = {name: count_tokens(definition, encoding, added) for name, definition in tools.items()}
        result_counts = [count_tokens(result, encoding, added) for result in results]
    except Exception as exc:  # noqa: BLE001 — a tokenizer that fails must not hide the prompt
        return TokenReport(
            encoding,
            None,
            {},
            [],
            f"the {encoding} tokenizer failed ({type(exc).__name__}: {exc}); counts not shown",
        )
    notes = [f"counted with {encoding} (quicktok), chosen from {why}"]
    if why == "the model's name" and _normalise_model(model) == _DEMO_MODEL:
        notes.append(f"the demo model has no tokenizer; {encoding} is this app's stand-in")
    if extra:
        many = "token" if len(extra) == 1 else "tokens"
        notes.append(f"the {len(extra)} added {many} of the tokenizer config count as one token each")
    if as_sent:
        notes.append("the prompt total is of the messages as sent, without the provider's chat markup")
    elif not exact:
        notes.append("the prompt total is of this illustrative rendering")
    if how and (tool_counts or result_counts):
        notes.append(how)
    return TokenReport(encoding, prompt, tool_counts, result_counts, "; ".join(notes))
