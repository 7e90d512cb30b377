"""Reading a text reply costs work in proportion to its length, whatever the model writes in it.

Three readings grew faster than the reply: the fence openers before a call were stripped one at
a time, each time searching the whole prose again (2,000 "```" lines after 100 kB took 10 s, and
"```", spaces, then anything else took the square of the spaces); a reply ending in "<" and m word
characters and ">" took m² steps to rule out a cut-off call tag; and a reply fenced as a whole
took the cube of a run of spaces inside the fence. Each is now read in one pass, and every reading
is the one read before: the old helpers are kept here as the reference.
"""

from __future__ import annotations

import itertools
import json
import random
import re
from collections.abc import Iterator

import pytest

from conversations.loop.parsing import (
    arguments,
    json_calls,
    labels,
    parse_json_reply,
    parse_label,
    parse_xml_calls,
    text,
    xml_calls,
)
from conversations.typealias import JSONDict
from tests.support import within_cpu_limit

# CPU seconds a subprocess may spend reading one hostile reply of about 1 MB: one pass takes a
# few hundredths of a second, the old readings took minutes to days.
CPU_BUDGET = 10
MB = 1_000_000

# --- The helpers as they were --------------------------------------------------------------------

_OLD_FENCE_LANGS = r"(?:xml|jsonl?|json5|javascript|js|python|text|plaintext)"
_OLD_FENCE_BEFORE = re.compile(
    rf"(?:(?:```|~~~)[ \t]*[\w+.-]*|(?:\b{_OLD_FENCE_LANGS}[ \t]*)?copy[ \t]*code"
    rf"|(?:\A|(?<=\n))[ \t]*{_OLD_FENCE_LANGS})\s*\Z",
    re.I,
)
_OLD_WHOLE_FENCE = re.compile(
    r"\A\s*(?:```|~~~)[ \t]*[\w+.-]*[ \t]*(?:copy[ \t]*code)?[ \t]*\n(.*?)\n?[ \t]*(?:```|~~~)?\s*\Z",
    re.I | re.S,
)
_OLD_TRAILING_TAG = re.compile(r"<(/?)(?:[\w.-]+:)?(\w*)([^<>]*)\Z")


def _old_strip_fence_before(prose: str) -> tuple[str, bool]:
    stripped = False
    while match := _OLD_FENCE_BEFORE.search(prose):
        prose = prose[: match.start()]
        stripped = True
    return prose, stripped


def _old_unfence_whole(reply: str) -> tuple[str, bool]:
    match = _OLD_WHOLE_FENCE.match(reply)
    return (match.group(1), True) if match else (reply, False)


@pytest.fixture
def old_helpers(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(text, "_strip_fence_before", _old_strip_fence_before)
    monkeypatch.setattr(xml_calls, "_TRAILING_TAG", _OLD_TRAILING_TAG)
    for module in (text, json_calls, labels, arguments):
        monkeypatch.setattr(module, "unfence_whole", _old_unfence_whole)


# --- The same readings ---------------------------------------------------------------------------

# Whitespace of every kind (NBSP, line and record separators, NEL), case folds re.I makes
# ("ſ" is an "s", "K" a "k"), bidi controls, astral characters, CRLF.
_ODD = ["\u00a0", "\u2028", "\x1c", "\x85", "\u3000", "ſ", "jſon", "K", "İ", "é", "\u202e", "𝔘", "\r"]
_FENCE_PIECES = [
    *["```", "~~~", "````", "```xml", "```JSON", "~~~ python", "```c++", "```\tjs-x.y"],
    *["xml", "json", "jsonl", "json5", "JS", "javascript", "python", "text", "plaintext", "PlainText"],
    *["copy", "code", "Copy code", "copy\tcode", "copycode", "jsonCopy code", "xmlcopy"],
    *[" ", "\t", "\n", "\r\n", "\n\n", " \t ", "x", "!", "`", "~", "-", ".", "+", "_", "a1", "<", ">"],
    *_ODD,
]
_TAG_PIECES = [
    *["<", "</", ">", "<<", "ns:", "a.b-c:", ":", "/", "-", ".", "=", "'", '"', 'name="x"', " ", "\n"],
    *["invoke", "invo", "INVOKE", "function_calls", "function_", "parameter", "param", "x", "1", "é", "ſ"],
]
_WHOLE_PIECES = [
    *["```", "~~~", "````", "```json", "xml", "Copy code", "copy", "code", "c++", " ", "\t", "\n"],
    *["\r\n", "\n\n", '{"a": 1}', "[1]", "x", "`", "\u00a0", "\u2028", "\x85", "ſ", "\u202e"],
]


def _texts(pieces: list[str], whole: int, drawn: int, seed: int) -> Iterator[str]:
    """Every text of up to ``whole`` pieces, then ``drawn`` random texts of up to 9 pieces."""
    for size in range(whole + 1):
        for combination in itertools.product(pieces, repeat=size):
            yield "".join(combination)
    rng = random.Random(seed)
    for _ in range(drawn):
        yield "".join(rng.choices(pieces, k=rng.randint(4, 9)))


def test_re_whitespace_is_str_whitespace() -> None:
    """``unfence_whole`` trims with ``str.rstrip()`` where the old pattern used ``\\s``."""
    every = "".join(map(chr, range(0x110000)))
    assert re.findall(r"\s", every) == [char for char in every if char.isspace()]


def test_fence_openers_before_a_call_are_stripped_as_before() -> None:
    for prose in _texts(_FENCE_PIECES, whole=3, drawn=40_000, seed=1):
        assert text._strip_fence_before(prose) == _old_strip_fence_before(prose), prose


def test_a_cut_off_tag_is_found_as_before() -> None:
    for tail in _texts(_TAG_PIECES, whole=3, drawn=40_000, seed=2):
        new, old = xml_calls._TRAILING_TAG.search(tail), _OLD_TRAILING_TAG.search(tail)
        assert (new and (new.span(), new.groups())) == (old and (old.span(), old.groups())), tail


def test_a_fence_around_the_whole_reply_is_unwrapped_as_before() -> None:
    for reply in _texts(_WHOLE_PIECES, whole=3, drawn=60_000, seed=3):
        assert text.unfence_whole(reply) == _old_unfence_whole(reply), reply


SCHEMAS: dict[str, JSONDict] = {
    "get_time": {"type": "object", "properties": {}},
    "get_weather": {
        "type": "object",
        "properties": {"city": {"type": "string"}, "tags": {"type": "array"}, "where": {"type": "object"}},
    },
}
XML_CALL = (
    '<function_calls>\n<invoke name="get_weather">\n<parameter name="city">Paris</parameter>\n'
    '<parameter name="tags">```json\n["a"]\n```</parameter>\n</invoke>\n</function_calls>'
)
BARE_INVOKE = "<ns:invoke name='get_time'></ns:invoke>"
JSON_CALL = '{"tool": "get_weather", "arguments": {"city": "Paris", "tags": ["a"]}}'
BEFORE = [
    *["", "Sure.\n", "Sure. ", "```xml\n", "```\n~~~\n", "xml Copy code\n", "jsonCopy code\n"],
    *["Here:\n```\n```json\n", "\r\n```json\r\n", "text\n  python\n", "\u202egnirts\u202c ```\n"],
    *["Look:\n\n```XML   \n", "a```b ```c++\n", "<think>```xml</think>```\n", "ſ ```\u00a0\n"],
]
AFTER = [
    *["", "\n```", "\n```\nDone.", "\r\n~~~\r\n", "<invo", '<parameter name="c', "</", "<ns:inv"],
    *["<a b>", "<", "<invoke name='x", "</function_calls", "\n```\n<function_", " <b>bold</b> x"],
]
LABEL_REPLIES = ["get_time", "```\nget_time\n```", "~~~text\nnone\n~~~", "```\n`get_weather`.\n", "Tool: x"]


def _replies() -> Iterator[str]:
    for call in (XML_CALL, BARE_INVOKE, JSON_CALL, XML_CALL + "\n" + JSON_CALL, ""):
        for before, after in itertools.product(BEFORE, AFTER):
            yield before + call + after


def _read_all() -> list[object]:
    """Every reply read by every reader, and the hostile replies below, small enough for the old
    readings, read as the budget test reads them."""
    names = list(SCHEMAS)
    results: list[object] = []
    for reply in [*_replies(), *LABEL_REPLIES]:
        results += [
            parse_xml_calls(reply, schemas=SCHEMAS),
            parse_json_reply(reply, schemas=SCHEMAS),
            parse_label(reply, names=names),
        ]
    for size in (1, 16, 100, 500):
        scope: dict[str, object] = {}
        exec(_setup(size), scope)
        results += [eval(f"show({call})", scope) for call, _ in HOSTILE.values()]
    return results


@pytest.fixture
def read_before(old_helpers: None) -> list[object]:
    return _read_all()


def test_replies_are_read_as_before(read_before: list[object], monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.undo()
    assert text._strip_fence_before is not _old_strip_fence_before
    assert json_calls.unfence_whole is text.unfence_whole is not _old_unfence_whole
    read_now = _read_all()
    assert len(read_now) == len(read_before) > 3_000
    for now, before in zip(read_now, read_before, strict=True):
        assert now == before


# --- Bounded work --------------------------------------------------------------------------------


def _setup(mb: int) -> str:
    """What a hostile reply's expression needs: the readers, the calls, and ``MB`` as ``mb``."""
    return f"""
import json
from conversations.loop.parsing import parse_json_reply, parse_label, parse_xml_calls
SCHEMAS = {SCHEMAS!r}
XML_CALL = {XML_CALL!r}
JSON_CALL = {JSON_CALL!r}
MB = {mb}
def show(result):
    if isinstance(result, tuple):
        return list(result)
    return [[[c.name, c.arguments] for c in result.calls], len(result.text), result.text[:20], result.diagnostics]
"""


FENCED = "stripped a code fence around the call"
WEATHER = [["get_weather", {"city": "Paris", "tags": ["a"]}]]
# The hostile replies, about 1 MB each, and what is read from them.
HOSTILE: dict[str, tuple[str, list[object]]] = {
    "100 kB of words, then 2,000 fence openers before an XML call": (
        "parse_xml_calls('a ' * (MB // 20) + '```\\n' * (MB // 500) + XML_CALL, schemas=SCHEMAS)",
        [WEATHER, 99_999, "a " * 10, [FENCED]],
    ),
    "1 MB of fence openers before an XML call": (
        "parse_xml_calls('Here.\\n' + '```\\n' * (MB // 4) + XML_CALL, schemas=SCHEMAS)",
        [WEATHER, 5, "Here.", [FENCED]],
    ),
    "1 MB of fence openers before a JSON call": (
        "parse_json_reply('Here.\\n' + '~~~json\\n' * (MB // 8) + JSON_CALL, schemas=SCHEMAS)",
        [WEATHER, 5, "Here.", [FENCED]],
    ),
    "copy-code artefacts and language lines before a call": (
        "parse_xml_calls('xml Copy code\\n' * (MB // 28) + '\\njson' * (MB // 10) + XML_CALL, schemas=SCHEMAS)",
        [WEATHER, 0, "", [FENCED]],
    ),
    "a fence, 1 MB of spaces and a mark before a call": (
        "parse_xml_calls('```' + ' ' * MB + '!' + XML_CALL, schemas=SCHEMAS)",
        [WEATHER, MB + 4, "```" + " " * 17, []],
    ),
    "a fence, 1 MB of spaces and a copy-code artefact before a call": (
        "parse_xml_calls('```' + ' ' * MB + 'copy code' + XML_CALL, schemas=SCHEMAS)",
        [WEATHER, 0, "", [FENCED]],
    ),
    "an XML reply ending in a 1 MB tag": (
        "parse_xml_calls(XML_CALL + '<' + 'a' * MB + '>', schemas=SCHEMAS)",
        [WEATHER, MB + 2, "<" + "a" * 19, []],
    ),
    "an XML reply ending in a 1 MB namespaced tag": (
        "parse_xml_calls(XML_CALL + '</' + 'a' * (MB // 2) + ':' + 'b' * (MB // 2) + ' x>', schemas=SCHEMAS)",
        [WEATHER, MB + 6, "</" + "a" * 18, []],
    ),
    "an XML value cut off in a 1 MB tag": (
        "parse_xml_calls('<invoke name=\"get_weather\"><parameter name=\"city\">Paris <' + 'a' * MB + '>', schemas=SCHEMAS)",
        [
            [["get_weather", {"city": "Paris <" + "a" * MB + ">"}]],
            0,
            "",
            [
                "read an <invoke> that is not inside <function_calls>",
                "reply is truncated: </parameter> of get_weather.city never closed, its partial value is kept; kept what was complete",
            ],
        ],
    ),
    "a JSON reply fenced whole, the fence line 1 MB of spaces": (
        "parse_json_reply('```' + ' ' * MB + '!\\n' + JSON_CALL, schemas=SCHEMAS)",
        [WEATHER, MB + 4, "```" + " " * 17, []],
    ),
    "a JSON reply fenced whole, 1 MB of spaces inside": (
        "parse_json_reply('```json\\n' + JSON_CALL + ' ' * MB + 'x\\n```', schemas=SCHEMAS)",
        [WEATHER, 5, "x\n```", [FENCED]],
    ),
    "a label fenced whole, 1 MB of line breaks inside": (
        "parse_label('```\\n' + '\\n' * MB + 'get_time\\n' + '\\n' * MB + '```', names=list(SCHEMAS))",
        ["get_time", []],
    ),
    "an array value fenced, 1 MB of spaces inside": (
        "parse_xml_calls('<invoke name=\"get_weather\"><parameter name=\"tags\">```\\n' + ' ' * MB + '[1]</parameter></invoke>', schemas=SCHEMAS)",
        [
            [["get_weather", {"tags": [1]}]],
            0,
            "",
            ["read an <invoke> that is not inside <function_calls>"],
        ],
    ),
}


@pytest.mark.parametrize("shape", list(HOSTILE))
def test_a_hostile_reply_is_read_within_a_cpu_budget(shape: str) -> None:
    call, expected = HOSTILE[shape]
    out = within_cpu_limit(f"{_setup(MB)}\nprint(json.dumps(show({call})))\n", seconds=CPU_BUDGET)
    assert json.loads(out) == expected
