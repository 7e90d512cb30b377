"""A prompt's token count costs work in proportion to its length, however many special tokens it holds.

quicktok's own ``encode_with_special`` scans the rest of the text again at each special token it
meets: a conversation's spliced prompt holds two of them per message, so counting a long
conversation's prompt at every model step grew with the square of the conversation, and a tool
result full of ``<|im_start|>`` strings could hold a worker for minutes. The counts here split
the special tokens out themselves and encode only plain text, to the same counts.
"""

from __future__ import annotations

import re
from collections.abc import Iterator

import pytest
import quicktok

from conversations.loop.splicing import count_tokens
from conversations.loop.splicing import tokens as tokens_module
from conversations.loop.splicing.tokens import ENCODINGS

# Special tokens of every family, an added token, a 3.0 reserved token 3.1 dropped, bidi and
# astral characters, text glued to the tokens on both sides.
MIXED = (
    "<|im_start|>system\nYou are terse.<|im_end|>\n<|im_start|>user\nTime in Paris?<|im_end|>"
    "<|begin_of_text|><|start_header_id|>user<|end_header_id|>\n\nhi<|eot_id|>"
    "<|start|>assistant<|channel|>final<|message|>ok<|end|><|endoftext|>"
    '<tool_call>{"name": "t"}</tool_call> \u202egnirts\u202c 𝔘𝔫𝔦 '
    "<|reserved_special_token_250|><|python_tag|>x<|eom_id|>y<|im_start|><|im_start|>z"
)
ADDED = ("<tool_call>", "</tool_call>")


def _reference(text: str, encoding: str, added: tuple[str, ...]) -> int:
    """The count as quicktok's own special-token path gives it (what the product used before)."""
    base, extra, dropped = tokens_module._DERIVED.get(encoding, (encoding, (), ()))
    tokenizer = quicktok.get_encoding(base)
    singles = sorted({*extra, *added} - {""}, key=len, reverse=True)
    if not singles and not dropped:
        return len(tokenizer.encode_with_special(text))
    pattern = "(" + "|".join(re.escape(token) for token in [*singles, *dropped]) + ")"
    total = 0
    for index, piece in enumerate(re.split(pattern, text)):
        if not piece:
            continue
        if index % 2 == 0:
            total += len(tokenizer.encode_with_special(piece))
        elif piece in dropped and piece not in singles:
            total += len(tokenizer.encode_ordinary(piece))
        else:
            total += 1
    return total


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("added", [(), ADDED], ids=["no-added", "added"])
@pytest.mark.parametrize("text", [MIXED, MIXED * 7, "", "plain text only", "<|im_start|>"])
def test_counts_equal_quicktoks_own_special_token_path(
    encoding: str, added: tuple[str, ...], text: str
) -> None:
    assert count_tokens(text, encoding, added) == _reference(text, encoding, added)


class _Counting:
    """A tokenizer that records the text each call was given, and delegates to the real one."""

    def __init__(self, real: object, specials: frozenset[str]) -> None:
        self.real = real
        self.specials = specials
        self.fed: list[tuple[str, str]] = []
        self.special_tokens_set = real.special_tokens_set

    def encode_with_special(self, text: str) -> list[int]:
        self.fed.append(("encode_with_special", text))
        return self.real.encode_with_special(text)

    def encode_ordinary(self, text: str) -> list[int]:
        self.fed.append(("encode_ordinary", text))
        return self.real.encode_ordinary(text)


@pytest.fixture
def counting(monkeypatch: pytest.MonkeyPatch) -> Iterator[dict[str, _Counting]]:
    spies: dict[str, _Counting] = {}
    for base in ("qwen3", "llama3", "o200k_harmony"):
        real = quicktok.get_encoding(base)
        spies[base] = _Counting(real, frozenset(real.special_tokens_set))
        monkeypatch.setitem(tokens_module._LOADED, base, spies[base])
    yield spies


@pytest.mark.parametrize(
    ("encoding", "base"), [("qwen3", "qwen3"), ("llama3.1", "llama3"), ("o200k_harmony", "o200k_harmony")]
)
def test_a_long_prompt_is_fed_to_the_tokenizer_once_and_as_plain_text(
    counting: dict[str, _Counting], encoding: str, base: str
) -> None:
    """Each character reaches the tokenizer at most once, and never with a special token in it
    (which is what makes quicktok's special-token path rescan the text)."""
    prompt = "<|im_start|>user\nwhat time is it in Paris?<|im_end|>\n<|begin_of_text|><|eot_id|>" * 2_000
    spy = counting[base]

    count = count_tokens(prompt, encoding)

    assert count == _reference(prompt, encoding, ())
    assert sum(len(text) for _, text in spy.fed) <= len(prompt)
    assert [method for method, _ in spy.fed if method != "encode_ordinary"] == []
    assert not any(special in text for _, text in spy.fed for special in spy.specials)
